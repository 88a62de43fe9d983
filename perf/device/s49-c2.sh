# Forty-ninth session, call 2: grad_o_weight by the small-K kernel (ATTNBWD_CUDA_GQA_DWO_GEMM=smallk), first run.
# 1. its tests (the kernel alone against float64; gqa with smallk against the oracle; the refusals);
# 2. A/B at the small-T workloads (auto = cuBLASLt against smallk at 64 / 48 / 96 CTAs), three interleaved rounds;
# 3. timelines of #11 and #13 with smallk; memcheck and racecheck (plain GEMMs) on the new tests.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
T="$M/attnbwd_tests"
timeout "$(tmo 120)" "$T" --gtest_filter='CudaGqaRope.SmallKWgrad*:CudaGqaRope.DwoSmallK*:CudaGqaRope.Malformed*' \
  > "$R/tests-smallk.txt" 2>&1
echo "tests rc=$? t=$SECONDS"
grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]|FAILED  \]|Failure|error' "$R/tests-smallk.txt" | head -20
if grep -q '^\[  PASSED  \] 3 tests' "$R/tests-smallk.txt"; then
  abrun gqa_rope_backward 2,5,11,13 3 dwo-smallk 200 base="$P" smallk="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk" \
    sk48="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk,ATTNBWD_CUDA_GQA_DWO_SMS=48" \
    sk96="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk,ATTNBWD_CUDA_GQA_DWO_SMS=96"
  timeline gqa_rope_backward 11 gqa-11-smallk ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
  timeline gqa_rope_backward 13 gqa-13-smallk ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
  timeline gqa_rope_backward 11 gqa-11-auto
  sanitize memcheck 'CudaGqaRope.SmallKWgrad*:CudaGqaRope.DwoSmallK*' smallk 120
  sanitize racecheck 'CudaGqaRope.SmallKWgrad*' smallk 90 ATTNBWD_CUDA_SANITIZE_GEMM=plain
fi
fin
