# Fifty-ninth session, call 4 (bundle f69465b = main's code: the dQ pass, auto's key-major rule from S = 256 where
# 512 <= T <= 4096). Issue 6's remaining items on the new auto path: (1) on an H200 the four suites (gqa twice; issue
# figures), else the gqa suite twice; (2) float64 PyTorch over all 16 gqa workloads; (3) the gqa sanitizer matrix;
# (0) the new test of auto's rule (f69465b); (4) a lead: ATTN=kvws (with the dQ pass) at S = 128, #8 (B = 16,
# T = 2048: auto's gemm) and #2 (B = 2: small).
source perf/device/common.sh
LIMIT=${LIMIT:-500}
P=$M/attnbwd_perf
timeout "$(tmo 60)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.AutoTakes*' > "$R/tests-auto.txt" 2>&1
echo "test rc=$? t=$SECONDS"; grep -E "^\[ +(PASSED|FAILED)|Failure" -A6 "$R/tests-auto.txt" | head -20
for k in 1 2; do ok && PB "suite-gqa_rope_backward-$k" "$P" gqa_rope_backward all; done
case $GPU in
  *H200*) for op in out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward; do
            ok && PB "suite-$op-1" "$P" "$op" all; done ;;
esac
suite_e "$R"/suite-*.json
ok && timeout "$(tmo 200)" python3 tests/torch/check_workloads.py --cli "$M/attnbwd" --ops gqa_rope_backward \
  --workloads all --backend cuda --solexec .carry/solexec --no-emulated --json "$R/torch-gqa.json" > "$R/torch-gqa.txt" 2>&1
echo "torch gqa rc=$? t=$SECONDS"; tail -4 "$R/torch-gqa.txt"
ok && ATTNBWD_SANITIZE_VENDOR=auto timeout "$(tmo 200)" bash cmake/device-check.sh --bin "$M" \
  --out "$R/dc" --sanitize-workloads gqa_rope_backward \
  --skip tests,concurrency-soak,initcheck-probe,plain-gemm,memcheck,racecheck,initcheck,synccheck,torch,perf \
  > "$R/device-check.log" 2>&1
echo "device-check rc=$? t=$SECONDS"
cat "$R/dc/steps.txt" 2>/dev/null
grep -cE "^ok" "$R/dc/sanitize-workloads.txt" 2>/dev/null; grep -E "^FAIL" "$R/dc/sanitize-workloads.txt" 2>/dev/null | cut -c1-100
abrun gqa_rope_backward 8,2 3 kvws128 60 auto="$P" kvws="$P,ATTNBWD_CUDA_GQA_ATTN=kvws"
fin
