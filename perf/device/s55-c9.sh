# Fifty-fifth session, after call 7 (the producer fix passed on an H100): on an H200 only, the four suites once and
# mha's twice (the issue figures; mha's first H200 figure with PTRIM and the fix). On any other GPU it stops at once.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
case $GPU in
  *H200*) ;;
  *) echo "not an H200: nothing run"; fin; exit 0 ;;
esac
for op in vision_mha_norm_backward gqa_rope_backward out_proj_backward vision_varlen_rope_backward; do
  ok && PB "suite-$op-1" "$P" "$op" all
done
ok && PB suite-vision_mha_norm_backward-2 "$P" vision_mha_norm_backward all
suite_e "$R"/suite-*.json
fin
