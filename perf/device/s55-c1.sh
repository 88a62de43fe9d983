# Fifty-fifth session's first call (bundle of b8c2251 or later + perf-prev = e6a3883's perf binary, MCAST removed but
# the producer's idle threads still following the empty barriers): (1) every mha test with the producer fix (b8c2251,
# never run on a GPU), FusedLaunchFinishesCallAfterCall among them; (2) #4 alone 20 times under 8 s caps with the fix
# (the fused launch hung in 9 of 15 runs with 89db8b6's build, 0 of 25 with e6a3883's); (3) the A/B of the fix
# against perf-prev at #4, #8, #13, #10 (thirteenth session: the exiting form measured the same times); the mha suite
# before the A/B, then (4) on an H200 each suite once more (the issue figures; mha's first with PTRIM on an H200).
# Device time is short after refused starts: the steps run in the order of what they settle, and LIMIT cuts the rest.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
soak vision_mha_norm_backward 4 20
ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all
[ -x "$M/perf-prev" ] && abrun vision_mha_norm_backward 4,8,13,10 3 producer 120 prev="$M/perf-prev" fix="$P"
case $GPU in
  *H200*) for op in gqa_rope_backward out_proj_backward vision_varlen_rope_backward vision_mha_norm_backward; do
            ok && PB "suite-$op-2" "$P" "$op" all
          done ;;
esac
suite_e "$R"/suite-*.json
fin
