# Sixty-first session, call 3 on (bundle of main, 9edade2). On an H200, issue 6's whole list as s61-c1.sh's H200 branch
# (the four suites twice, gqa's 16 workloads against the oracle, float64 PyTorch, the sanitizer matrix, the stage
# split, every CUDA test with what is left). Elsewhere (an H100): every CUDA test in three shards — main's code since
# 156e443 (lt_dw named once in gqa) has run on a GPU only in call 2's suite, not under the tests.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
case $GPU in
  *H200*) exec bash perf/device/s61-c1.sh ;;
  *) all_tests ;;
esac
fin
