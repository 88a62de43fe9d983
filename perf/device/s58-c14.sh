# Fifty-eighth session: on an H200 first the four suites twice (issue figures; gqa's first with KVDQ = ws), then on any
# card the sanitizer matrix over gqa's workloads (cmake/device-check.sh --sanitize-workloads gqa_rope_backward,
# ATTNBWD_SANITIZE_VENDOR=auto: memcheck and synccheck on all 16, racecheck and initcheck on the smallest) on a373fb0.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
case $GPU in
  *H200*) suites 2 ;;
esac
ok && ATTNBWD_SANITIZE_VENDOR=auto timeout "$(tmo 400)" bash cmake/device-check.sh --bin "$M" \
  --out "$R/dc" --sanitize-workloads gqa_rope_backward \
  --skip tests,concurrency-soak,initcheck-probe,plain-gemm,memcheck,racecheck,initcheck,synccheck,torch,perf \
  > "$R/device-check.log" 2>&1
echo "device-check rc=$? t=$SECONDS"
cat "$R/dc/steps.txt" 2>/dev/null
grep -E "^(ok|FAIL)" "$R/dc/sanitize-workloads.txt" 2>/dev/null | cut -c1-100
fin
