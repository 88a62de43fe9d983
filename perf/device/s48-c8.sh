# Forty-eighth session, call 8 (bundle of c3f8a99's binaries): on an H200 only, the four suites twice (issues 5-8's
# figures) and then every CUDA test as far as the limit allows; on an H100, nothing (its suites and tests ran in call 5).
source perf/device/common.sh
LIMIT=${LIMIT:-330}
P=$M/attnbwd_perf
case $GPU in
  *H200*) suites 2; shards 'Cuda*:*Cuda*' 230 ;;
  *) echo "not an H200: nothing to do" ;;
esac
fin
