# Next session, call 1 (written in the forty-sixth session, perf/NOTES.md, its section): the sanitizer verdicts the
# forty-sixth session's autos still lack. Its memcheck and initcheck on the DA auto and block-table tests reported 0
# errors; under racecheck DaAuto passed (its reports all inside cuBLASLt's nvjet kernels) and BlockTable was cut at the
# 100 s cap; synccheck did not run. Neither auto adds shared-memory
# code (the pointer-array batch's address kernel uses none; the block-table kernel is unchanged, only its stream moved),
# so a hazard is not expected. Then the four suites once each (issues 5-8's figures; next-c2.sh takes two each).
#   bash cmake/dev.sh build-cuda && bash perf/device/bundle.sh
#   run(command="LIMIT=540 bash perf/device/next-c1.sh", carry=[".carry"])
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
sanitize racecheck 'CudaVisionVarlenRope.BlockTable*' table-race 240
sanitize synccheck 'CudaGqaRope.DaAuto*:CudaVisionVarlenRope.BlockTable*' da-table-sync 100
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
done
suite_e $R/suite-*.json
fin
