# Forty-seventh session, call 6: every CUDA test on 5741b85's binaries (DKDV auto = batch), then the four suites twice
# (issue figures; an H200 if one came).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 260
for op in gqa_rope_backward out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
  ok && PB suite-$op-2 $P $op all
done
suite_e $R/suite-*.json
fin
