# Forty-second session, call 5 (bundle of ATTNBWD_CUDA_THIN_DWSTORE): call 4's ncu of the thin kernel at #13 (H200):
# tensor pipe 75 % of active cycles at ncu's 1.32 GHz; the dW warpgroup (the longer one: 16 dW + 4 dX products per
# k-block against 12) spends ~28 % of its stall samples in store_dw_block's two named barriers and proxy fence around
# the single staging buffer (the previous block's TMA store must have read it), and the dX warpgroup ~66 % waiting on
# full slots (it runs ahead, held by the rings that the dW warpgroup releases). direct: dW stored from the registers
# while the next products run (no staging, no barriers); direct4: and one more W stage in the freed 16 KB.
# Prediction: the dW warpgroup's loop −15-25 %, the kernel −5-12 µs at #13 and #2 (1.04-1.09x per call), less at #5
# and #11 (MB ≤ 3, more DRAM-bound): 1.02-1.05x. 1. Tests. 2. tma / direct / direct4 at #2 #5 #11 #13, three rounds.
# 3. Timelines #13; float64 PyTorch #13, #5 with direct; memcheck on out_proj's direct test.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinDwStores*:CudaOutProj.Thin*:CudaGqaRope.ThinQkv*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*' 150
ok && timeout $(tmo 170) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11,13 --rounds 3 \
  --variant tma=$P,ATTNBWD_CUDA_THIN_DWSTORE=tma --variant direct=$P,ATTNBWD_CUDA_THIN_DWSTORE=direct \
  --variant direct4=$P,ATTNBWD_CUDA_THIN_DWSTORE=direct4 --out $R/ab-thin-dwstore.json > $R/ab-thin-dwstore.txt 2>&1
echo "ab rc=$? t=$SECONDS"; tail -8 $R/ab-thin-dwstore.txt
mkdir -p $R/tl
for v in direct direct4; do
  ok && env ATTNBWD_CUDA_THIN_DWSTORE=$v ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-$v.txt timeout $(tmo 30) $P --backend=cuda \
    --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-$v.log 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-13-$v.txt > $R/tl/gqa-13-$v-print.txt 2>&1; grep -i -E 'thin|span' $R/tl/gqa-13-$v-print.txt | head -3
done
for w in 13 5; do
  ok && env ATTNBWD_CUDA_THIN_DWSTORE=direct timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
    --ops 003 --workloads $w --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -1 $R/torch-$w.txt
done
ok && timeout $(tmo 120) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaOutProj.ThinPathWithDirect*' > $R/memcheck-direct.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-direct.txt | tail -3
fin
