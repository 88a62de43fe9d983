# Next session, call 3: the four suites on the code with call 1 and 2's winners made auto (rebundle first:
# `cd build/cuda && ninja && bash perf/device/bundle.sh`), one run each, for the results JSON and the closing note.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op $P $op all
done
fin
