# Forty-ninth session, call 1: an upper bound for a lean grad_o_weight at small T (perf/NOTES.md, forty-ninth session).
# The bundle carries attnbwd_perf_probe (the library with perf/probes/dwo_skip_memset.patch): grad_o_weight's GEMM
# replaced, by ATTNBWD_PROBE_DWO_MODE, by nothing (skip: the bound of a free dWo) or by a 42 MB cudaMemsetAsync on the
# side stream (memset: dWo at DRAM write rate on few SMs' worth of work); unset, the library's GEMM. Results of
# skip/memset are wrong by design: timing only. Then the four suites once (on an H200: the issues' figures).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
Q=$M/attnbwd_perf_probe
abrun gqa_rope_backward 2,5,11,13,7,12,0 3 dwo-probe 220 base="$P" skip="$Q,ATTNBWD_PROBE_DWO_MODE=skip" \
  memset="$Q,ATTNBWD_PROBE_DWO_MODE=memset"
P=$Q timeline gqa_rope_backward 11 gqa-11-memset ATTNBWD_PROBE_DWO_MODE=memset
P=$Q timeline gqa_rope_backward 13 gqa-13-memset ATTNBWD_PROBE_DWO_MODE=memset
timeline gqa_rope_backward 13 gqa-13-auto
suites 1
fin
