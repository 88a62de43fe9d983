# Fifty-first session, call 1: the graph tests first (split's present form and the new sidedirect never ran on a
# GPU; a failed capture now records its cause), then ATTNBWD_CUDA_GRAPHS=split and =sidedirect against auto at gqa's
# small and middle workloads, sidedirect + smallk dWo, #11's timelines, varlen and mha A/B, a sanitizer pass on the
# graph tests. Binaries: .carry (the bundle's commit in .carry/bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
L=$M/attnbwd_perf
P=$L
shards 'CudaGraphs.*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -60
SK="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
abrun gqa_rope_backward 2,5,11,13,7,12 3 split 150 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  sided="$L,ATTNBWD_CUDA_GRAPHS=sidedirect" splitsk="$L,ATTNBWD_CUDA_GRAPHS=split,$SK" \
  sidedsk="$L,ATTNBWD_CUDA_GRAPHS=sidedirect,$SK"
timeline gqa_rope_backward 11 gqa-11-split ATTNBWD_CUDA_GRAPHS=split
timeline gqa_rope_backward 11 gqa-11-sided ATTNBWD_CUDA_GRAPHS=sidedirect
timeline gqa_rope_backward 11 gqa-11-sidedsk ATTNBWD_CUDA_GRAPHS=sidedirect $SK
timeline gqa_rope_backward 11 gqa-11-auto
abrun vision_varlen_rope_backward 8,11,1,12 3 varlen-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  sided="$L,ATTNBWD_CUDA_GRAPHS=sidedirect"
abrun vision_mha_norm_backward 10,4,3 3 mha-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  sided="$L,ATTNBWD_CUDA_GRAPHS=sidedirect"
sanitize memcheck 'CudaGraphs.Split*:CudaGraphs.GqaRope*' graphs 90
fin
