# Forty-first session, call 4 (bundle of ATTNBWD_CUDA_GQA_MERGE_PDL): the merge pass as a programmatic dependent of
# dK32's GEMM (dQ's GEMM queued first), so its q slots may run beside that GEMM. 1. Tests: the new MergeAfterDk test,
# the switch test; memcheck on the new test. 2. on against off at the nine GEMM-attention-path workloads (#0 #1 #3 #7 #8
# #10 #12 #13 #15), two interleaved rounds (graphs on: the programmatic edge captured). Prediction: 1.01-1.04x at #13,
# #12, #7, #0, #1 where cuBLASLt's dK32 kernel lets dependents start early (the pass's 10-12 us beside grad_o_weight,
# two thirds of it then beside the GEMM); 1.00 where it does not (the timeline shows which: the pass's start against the
# GEMM's end). 3. Timeline #13 on; float64 PyTorch #13 and #7 with on.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.MergeAfterDk*:CudaGqaRope.MalformedSwitches*' 120
ok && timeout $(tmo 90) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaGqaRope.MergeAfterDk*' > $R/memcheck-merge-pdl.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-merge-pdl.txt | tail -3
mkdir -p $R/tl
ok && env ATTNBWD_CUDA_GQA_MERGE_PDL=on ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-on.txt timeout $(tmo 30) $P --backend=cuda \
  --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-on.log 2>&1
echo "tl rc=$? t=$SECONDS"
python3 perf/scripts/timeline.py $R/tl/gqa-13-on.txt > $R/tl/gqa-13-on-print.txt 2>&1; head -16 $R/tl/gqa-13-on-print.txt
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,7,8,10,12,13,15 --rounds 2 \
  --variant off=$P --variant on=$P,ATTNBWD_CUDA_GQA_MERGE_PDL=on --out $R/ab-merge-pdl.json > $R/ab-merge-pdl.txt 2>&1
echo "ab merge-pdl rc=$? t=$SECONDS"; tail -12 $R/ab-merge-pdl.txt
for w in 13 7; do
  ok && env ATTNBWD_CUDA_GQA_MERGE_PDL=on timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
    --ops 003 --workloads $w --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -2 $R/torch-$w.txt
done
fin
