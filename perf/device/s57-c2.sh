# Fifty-seventh session's second call (written in the fifty-sixth): issue 7's sanitizer item on the current kernels —
# compute-sanitizer over `attnbwd run` on every mha workload (cmake/device-check.sh --sanitize-workloads: memcheck
# and synccheck on all 16, racecheck and initcheck on the smallest, #10; ATTNBWD_SANITIZE_VENDOR=auto: racecheck with
# the plain GEMMs, initcheck and synccheck with cuBLASLt's kernels left uninstrumented), six jobs at a time.
# Resumable: a later call passes the committed sanitize-workloads.txt of this one as DONE=path (its "ok" jobs skipped).
# It ran in the fifty-seventh session's call 16: 34 of 34 jobs in 37 s on an H100 (the slow tools are slow only on
# cuBLASLt's instrumented kernels, which VENDOR=auto leaves out), so one call holds the whole matrix.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
done_arg=()
[ -n "${DONE:-}" ] && done_arg=(ATTNBWD_SANITIZE_DONE="$PWD/$DONE")
env "${done_arg[@]}" ATTNBWD_SANITIZE_VENDOR=auto timeout "$(tmo 520)" bash cmake/device-check.sh --bin "$M" \
  --out "$R/dc" --sanitize-workloads vision_mha_norm_backward \
  --skip tests,concurrency-soak,initcheck-probe,plain-gemm,memcheck,racecheck,initcheck,synccheck,torch,perf \
  > "$R/device-check.log" 2>&1
echo "device-check rc=$? t=$SECONDS"
cat "$R/dc/steps.txt" 2>/dev/null
grep -E "^(ok|FAIL)" "$R/dc/sanitize-workloads.txt" 2>/dev/null | cut -c1-100
fin
