# Fifty-ninth session, call 9 (bundle f69465b = main's code): on an H200 the four suites twice (issue figures: gqa
# with the dQ pass and auto's key-major rule from S = 256); on an H100 the stage split at #15 and #3 (the new path
# there) and the gqa suite once.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
case $GPU in
  *H200*) suites 2 ;;
  *) timeline gqa_rope_backward 15 gqa-15; timeline gqa_rope_backward 3 gqa-3
     ok && PB suite-gqa_rope_backward-1 "$P" gqa_rope_backward all; suite_e "$R"/suite-*.json ;;
esac
fin
