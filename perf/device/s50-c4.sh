# Fiftieth session, call 4 (s50-c3.sh cut to what fits the device time left after eight refused starts): the library's
# ATTNBWD_CUDA_GRAPHS=split (one graph per stream segment) against auto at gqa's small and middle workloads, the graph
# tests, #11's timeline under split; then the probe's two decisive cuts (a clean L2 before the fork, a spinner outside
# the graph), then varlen and mha where auto captures.
source perf/device/common.sh
LIMIT=${LIMIT:-240}
L=$M/attnbwd_perf
Q=$M/attnbwd_perf_probe7
P=$L
abrun gqa_rope_backward 2,5,11,13,7,12,0,1 3 split 80 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
timeline gqa_rope_backward 11 gqa-11-split ATTNBWD_CUDA_GRAPHS=split
shards 'CudaGraphs.*' 90
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16"
stamps "$Q" m6 $S ATTNBWD_PROBE_SMALLK_MODE=6
stamps "$Q" m6-clean1 $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_PROBE_CLEAN=1
stamps "$Q" m6-clean2 $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_PROBE_CLEAN=2
stamps "$Q" auto-out60 ATTNBWD_PROBE_OUTSIDE=60000
python3 perf/scripts/stamps.py "$R"/stamps-*.txt
abrun vision_varlen_rope_backward 8,11,1,12 3 varlen-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
abrun vision_mha_norm_backward 10,4,3 3 mha-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
abrun gqa_rope_backward 5,11 3 splitsk 30 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  splitsk="$L,ATTNBWD_CUDA_GRAPHS=split,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
fin
