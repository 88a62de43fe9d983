# Fifty-ninth session, the last call (bundle feff285: ATTNBWD_CUDA_GQA_DWQKV=batch, auto = apart). (1) The batch's
# test; (2) A/B apart / batch at #3, #6, #9, #10, #14, #15 (the call ends with the q/k/v weight gradients there),
# three rounds; (3) on an H200 the four suites twice (issue figures; auto = apart, so batch does not touch them).
source perf/device/common.sh
LIMIT=${LIMIT:-230}
P=$M/attnbwd_perf
timeout "$(tmo 60)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.WeightGradient*' > "$R/tests-dwqkv.txt" 2>&1
echo "test rc=$? t=$SECONDS"; grep -E "^\[ +(PASSED|FAILED)|Failure" -A6 "$R/tests-dwqkv.txt" | head -24
abrun gqa_rope_backward 3,6,9,10,14,15 3 dwqkv 60 apart="$P" batch="$P,ATTNBWD_CUDA_GQA_DWQKV=batch"
case $GPU in
  *H200*) suites 2 ;;
esac
fin
