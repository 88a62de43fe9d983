# Fiftieth session, call 3: is the stall the L2 write-back of dirty lines? (see graph_effect_probe7.patch)
# Call 2 put the stall before dp_softmax's first tile (22 K cycles against 6.3 K), with any spin length and with a bare
# spinner (mode 6). The perf harness's flush leaves L2 full of dirty lines (a memset of 2 x L2); if the side branch's
# launch inside a graph costs a write-back of L2, a clean L2 before the fork (ATTNBWD_PROBE_CLEAN=1) removes it. And:
# does a spinner launched directly on the side stream, outside the graph (ATTNBWD_PROBE_OUTSIDE), slow the graph's
# kernels (dA, dp_softmax)? Then the library's ATTNBWD_CUDA_GRAPHS=split (22a6301: one graph per stream segment): the
# graph tests, and A/B against auto (gqa all, mha and varlen where auto captures).
source perf/device/common.sh
LIMIT=${LIMIT:-570}
Q=$M/attnbwd_perf_probe7
P=$Q
L=$M/attnbwd_perf
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16"
abrun gqa_rope_backward all 2 split 200 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
shards 'CudaGraphs.*' 150
abrun gqa_rope_backward 2,5,11,13 3 splitsk 60 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  splitsk="$L,ATTNBWD_CUDA_GRAPHS=split,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
P=$L
timeline gqa_rope_backward 11 gqa-11-split ATTNBWD_CUDA_GRAPHS=split
timeline gqa_rope_backward 11 gqa-11-split-smallk ATTNBWD_CUDA_GRAPHS=split ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
P=$Q
stamps "$Q" auto
stamps "$Q" auto-clean1 ATTNBWD_PROBE_CLEAN=1
stamps "$Q" m6 $S ATTNBWD_PROBE_SMALLK_MODE=6
stamps "$Q" m6-clean1 $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_PROBE_CLEAN=1
stamps "$Q" m6-clean2 $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_PROBE_CLEAN=2
stamps "$Q" m8 $S ATTNBWD_PROBE_SMALLK_MODE=8
stamps "$Q" m8-clean1 $S ATTNBWD_PROBE_SMALLK_MODE=8 ATTNBWD_PROBE_CLEAN=1
stamps "$Q" auto-out60 ATTNBWD_PROBE_OUTSIDE=60000
stamps "$Q" auto-out60-clean1 ATTNBWD_PROBE_OUTSIDE=60000 ATTNBWD_PROBE_CLEAN=1
python3 perf/scripts/stamps.py "$R"/stamps-*.txt
timeline gqa_rope_backward 11 m6 $S ATTNBWD_PROBE_SMALLK_MODE=6
timeline gqa_rope_backward 11 m6-clean1 $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_PROBE_CLEAN=1
timeline gqa_rope_backward 11 m8 $S ATTNBWD_PROBE_SMALLK_MODE=8
timeline gqa_rope_backward 11 auto
timeline gqa_rope_backward 11 auto-out60 ATTNBWD_PROBE_OUTSIDE=60000
abrun vision_varlen_rope_backward 8,11,1,12,0,5,3,7,9,13 3 varlen-split 90 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
abrun vision_mha_norm_backward 10,4,3,1,12 3 mha-split 60 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
fin
