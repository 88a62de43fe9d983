# Fifty-eighth session: the first GPU run of ATTNBWD_CUDA_GQA_KVDQ (built this session, auto = off).
# (1) its test alone under a 150 s cap; (2) every CudaGqaRope test in three shards (the key-major ws kernel is now a
#     template on whether it stores dSᵀ); (3) if (1) passed: float64 PyTorch on #4 and #6 with KVDQ=on, interleaved
#     rounds off / on at #4, #6, #9, #14 (the key-major workloads) and #6's timeline with on;
# (4) on an H200 the four suites twice (the defaults did not change).
source perf/device/common.sh
LIMIT=${LIMIT:-560}
P=$M/attnbwd_perf
ok && timeout "$(tmo 150)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.KeyMajorDqPass*' > "$R/tests-kvdq.txt" 2>&1
echo "kvdq test rc=$? t=$SECONDS"; grep -E "PASSED|FAILED|OK \]|Failure|rror|atol|mismatch" "$R/tests-kvdq.txt" | head -16
kv_ok=0; grep -q "PASSED.*1 test" "$R/tests-kvdq.txt" && kv_ok=1
shards 'CudaGqaRope.*:-CudaGqaRope.KeyMajorDqPass*' 150
grep -h -B2 -A12 "Failure" "$R"/tests-[0-9].txt | head -30
if [ $kv_ok = 1 ]; then
  torch_check gqa_rope_backward 4 ATTNBWD_CUDA_GQA_KVDQ=on
  torch_check gqa_rope_backward 6 ATTNBWD_CUDA_GQA_KVDQ=on
  abrun gqa_rope_backward 4,6,9,14 3 kvdq 170 off="$P" on="$P,ATTNBWD_CUDA_GQA_KVDQ=on"
  timeline gqa_rope_backward 6 gqa-6-kvdq ATTNBWD_CUDA_GQA_KVDQ=on
fi
case $GPU in
  *H200*) suites 2 ;;
esac
fin
