# Fifty-eighth session: where gqa's mid and large workloads spend their time on today's kernels (no timeline of them
# since the fortieth session): CUPTI timelines of #6 (S = 2048), #4 (S = 1024), #9 (B = 4, S = 1024), #0 (S = 691),
# #3 (B = 16, S = 256) on whatever card comes (ratios only on an H100); on an H200 also the four suites twice.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
for w in 6 4 9 0 3; do timeline gqa_rope_backward "$w" "gqa-$w-auto" > /dev/null; echo "timeline #$w t=$SECONDS"; done
case $GPU in
  *H200*) suites 2 ;;
esac
fin
