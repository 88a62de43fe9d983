# Fifty-second session, call 3 (retried): the new ATTNBWD_CUDA_GQA_SMALL_PREFETCH test and its neighbours, then at the
# small path (#2, #5, #11) auto against the merged epilogue (ATTNBWD_CUDA_GQA_MERGE=fused; last measured in the
# twenty-sixth session, before CUDA graphs and late grad_o_weight beside the second small kernel), the L2 prefetch
# (SMALL_PREFETCH=on) and both; the small path forced at #13 (S = 256) and #7 (S = 293), last measured there in the
# twenty-sixth session; #11's timelines; then on an H200 the four suites twice (the issue figures).
# Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-400}
L=$M/attnbwd_perf
P=$L
shards 'CudaGqaRope.SmallAttnL2Prefetch*:CudaGqaRope.Malformed*:CudaGqaRope.SmallAttnSecond*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
PF=ATTNBWD_CUDA_GQA_SMALL_PREFETCH=on
FU=ATTNBWD_CUDA_GQA_MERGE=fused
abrun gqa_rope_backward 2,5,11 3 small 100 base="$L" fused="$L,$FU" pf="$L,$PF" fusedpf="$L,$FU,$PF"
abrun gqa_rope_backward 13,7 2 small-s256 60 base="$L" small="$L,ATTNBWD_CUDA_GQA_ATTN=small" \
  small1="$L,ATTNBWD_CUDA_GQA_ATTN=small,ATTNBWD_CUDA_GQA_SMALL_SPLIT=off"
timeline gqa_rope_backward 11 gqa-11-pf $PF
timeline gqa_rope_backward 11 gqa-11-fused $FU
timeline gqa_rope_backward 11 gqa-11-auto
case $GPU in *H200*) suites 2 ;; esac
fin
