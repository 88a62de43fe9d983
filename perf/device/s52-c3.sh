# Fifty-second session, call 3: the small path's merged epilogue (ATTNBWD_CUDA_GQA_MERGE=fused; last measured in the
# twenty-sixth session, before CUDA graphs and late grad_o_weight beside the second small kernel) against auto at
# #2, #5, #11, also with the thin launch as a plain launch (PDL=off); then on an H200 the four suites twice (the issue
# figures). Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-400}
L=$M/attnbwd_perf
P=$L
abrun gqa_rope_backward 2,5,11 3 merge 90 base="$L" fused="$L,ATTNBWD_CUDA_GQA_MERGE=fused" \
  fusedpdloff="$L,ATTNBWD_CUDA_GQA_MERGE=fused,ATTNBWD_CUDA_GQA_PDL=off" pdloff="$L,ATTNBWD_CUDA_GQA_PDL=off"
timeline gqa_rope_backward 11 gqa-11-fused ATTNBWD_CUDA_GQA_MERGE=fused
timeline gqa_rope_backward 11 gqa-11-auto
case $GPU in *H200*) suites 2 ;; esac
fin
