# Next session, call 2 (written in the forty-fifth session; ran as written in the forty-sixth, 90 s on an H200): the four
# ops' suites, two each (issues 5-8's figures).
# On an H100 the suites still run (E then against the H200 model: label the results h100).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
  ok && PB suite-$op-2 $P $op all
done
suite_e $R/suite-*.json
fin
