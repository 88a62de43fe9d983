# Sixty-first session, call 4 on (bundle of main, 9edade2; every CUDA test passed on it in call 3, an H100). On an H200,
# issue 6's whole list (s61-c1.sh's H200 branch). Elsewhere nothing: device time is kept for an H200.
source perf/device/common.sh
case $GPU in
  *H200*) exec bash perf/device/s61-c1.sh ;;
esac
fin
