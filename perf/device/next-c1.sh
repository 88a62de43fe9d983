# Fifty-first session, call 1: the fiftieth session's s50-c4.sh less the probe stamps (call 13 of that session ran
# the clean-L2 and outside-spinner cuts): ATTNBWD_CUDA_GRAPHS=split against auto at gqa's small and middle
# workloads, the graph tests (split's present form never ran on a GPU), #11's timeline under split, varlen and mha
# A/B, split + smallk. Binaries: .carry (5b089a1: a failed capture records its cause).
source perf/device/common.sh
LIMIT=${LIMIT:-240}
L=$M/attnbwd_perf
P=$L
shards 'CudaGraphs.*' 90
abrun gqa_rope_backward 2,5,11,13,7,12,0,1 3 split 80 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
timeline gqa_rope_backward 11 gqa-11-split ATTNBWD_CUDA_GRAPHS=split
abrun vision_varlen_rope_backward 8,11,1,12 3 varlen-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
abrun vision_mha_norm_backward 10,4,3 3 mha-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split"
abrun gqa_rope_backward 5,11 3 splitsk 30 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  splitsk="$L,ATTNBWD_CUDA_GRAPHS=split,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
fin
