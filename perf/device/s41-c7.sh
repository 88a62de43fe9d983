# Forty-first session, call 7 (bundle of ATTNBWD_CUDA_GQA_PADSIDE): the padded copies of the inputs Q, K, V on the side
# stream beside dA, dO's alone after dA. Count: the four-tensor pad launch takes 6.0 us at #7, ~11 at #0, 15.1 at #1
# (H200), three quarters of it the input copies; dA holds 128 of the 132 SMs (the copies get the other 4 while it runs,
# or run first if their grid is dispatched first: then ~the serial order, no loss). Prediction: #1 -5..-11 us, #0
# -4..-8, #7 -2..-4.5 (1.01-1.03x); the other workloads have no padding (the switch is an Error there).
# 1. Tests: the new PadSide test and the switch test; memcheck on the new test. 2. off / on at #0, #1, #7, three
# interleaved rounds. 3. Timeline of #1 with on; float64 PyTorch #1 and #7 with on.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
shards 'CudaGqaRope.PadSide*:CudaGqaRope.MalformedSwitches*' 120
ok && timeout $(tmo 60) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,7 --rounds 3 \
  --variant off=$P --variant on=$P,ATTNBWD_CUDA_GQA_PADSIDE=on --out $R/ab-padside.json > $R/ab-padside.txt 2>&1
echo "ab padside rc=$? t=$SECONDS"; tail -6 $R/ab-padside.txt
mkdir -p $R/tl
ok && env ATTNBWD_CUDA_GQA_PADSIDE=on ATTNBWD_PERF_TIMELINE=$R/tl/gqa-1-padside.txt timeout $(tmo 30) $P --backend=cuda \
  --ops=gqa_rope_backward --workloads=1 > $R/tl/gqa-1-padside.log 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-1-padside.txt > $R/tl/gqa-1-padside-print.txt 2>&1; head -12 $R/tl/gqa-1-padside-print.txt
for w in 1 7; do
  ok && env ATTNBWD_CUDA_GQA_PADSIDE=on timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
    --ops 003 --workloads $w --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -2 $R/torch-$w.txt
done
ok && timeout $(tmo 90) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaGqaRope.PadSide*' > $R/memcheck-padside.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-padside.txt | tail -3
fin
