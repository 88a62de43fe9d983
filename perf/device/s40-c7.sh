# Fortieth session, call 7 (bundle of the grouped launch's PDL): tests (the new PDL test, gqa graphs, out_proj: the
# producer's griddep_wait is in every linear_backward launch), memcheck on the new test; #7 (the only workload on the
# grouped q/k/v launch) PDL auto against thin (the grouped launch plain, as before), three interleaved rounds, with #12
# as a control (no grouped launch: ~1.00). Prediction: #7 -1..-4 us (1.005-1.02x). Then the out_proj and gqa suites.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
shards 'CudaGqaRope.QkvLaunches*:CudaGqaRope.MalformedSwitches*:CudaGraphs.Gqa*:CudaOutProj.*' 120
sanitize memcheck 'CudaGqaRope.QkvLaunches*' pdl 60
abrun gqa_rope_backward 7,12 3 pdl 60 thin=$P,ATTNBWD_CUDA_GQA_PDL=thin auto=$P
ok && PB suite-out_proj_backward $P out_proj_backward all
ok && PB suite-gqa_rope_backward $P gqa_rope_backward all
suite_e $R/suite-out_proj_backward.json $R/suite-gqa_rope_backward.json
fin
