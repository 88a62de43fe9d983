# Forty-second session, call 1 (bundle of ATTNBWD_CUDA_THIN_ORDER): the thin q/k/v launch in stream-K order (the
# 40 slices × 96 k-blocks of gqa's q/k/v dealt out over 132 CTAs, 29-30 k-blocks each, against 120 CTAs of 32 by
# ranges). Count (perf/NOTES.md, end of the forty-first session): -3 to -6 % of the launch, -2 to -4 us at #13 and #2,
# -1.5 to -3 us at #5 and #11: 1.01-1.03x per call. 1. Tests: the two stream-K tests, the thin tests, the switch and
# PDL tests. 2. streamk against ranges at #2 #5 #11 #13, three interleaved rounds. 3. Timeline #13 streamk; float64
# PyTorch #13 and #5 with streamk. 4. memcheck on out_proj's stream-K test.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinQkv*:CudaOutProj.Thin*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*' 150
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11,13 --rounds 3 \
  --variant ranges=$P,ATTNBWD_CUDA_THIN_ORDER=ranges --variant streamk=$P,ATTNBWD_CUDA_THIN_ORDER=streamk \
  --out $R/ab-thin-order.json > $R/ab-thin-order.txt 2>&1
echo "ab thin-order rc=$? t=$SECONDS"; tail -10 $R/ab-thin-order.txt
mkdir -p $R/tl
for v in streamk ranges; do
  ok && env ATTNBWD_CUDA_THIN_ORDER=$v ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-$v.txt timeout $(tmo 30) $P --backend=cuda \
    --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-$v.log 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-13-$v.txt > $R/tl/gqa-13-$v-print.txt 2>&1; grep -i -E 'thin|span' $R/tl/gqa-13-$v-print.txt | head -4
done
for w in 13 5; do
  ok && env ATTNBWD_CUDA_THIN_ORDER=streamk timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
    --ops 003 --workloads $w --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -2 $R/torch-$w.txt
done
ok && timeout $(tmo 120) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaOutProj.ThinPathInStreamK*' > $R/memcheck-streamk.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-streamk.txt | tail -3
fin
