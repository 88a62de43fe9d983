# Forty-seventh session, call 7 (an H200 if lent): the four suites twice on 5741b85's binaries (DKDV auto = batch).
source perf/device/common.sh
LIMIT=${LIMIT:-150}
P=$M/attnbwd_perf
for op in gqa_rope_backward out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
  ok && PB suite-$op-2 $P $op all
done
suite_e $R/suite-*.json
fin
