# Fifty-ninth session, calls from 10 on (bundle f69465b = main's code): on an H200 the four suites twice (the issue
# figures: gqa with the dQ pass and auto's key-major rule from S = 256); on an H100 nothing (the figures are the H200's).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
case $GPU in
  *H200*) suites 2 ;;
  *) echo "not an H200: nothing run" ;;
esac
fin
