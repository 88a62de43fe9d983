# Forty-ninth session, call 10: call 9 found the small path's first kernel slow beside a side-stream kernel only inside
# a CUDA graph (20.1 against 8.5 µs per CTA, its cycles too; 8.0 µs without graphs). A/B at the small-T workloads:
# auto; graphs off (ATTNBWD_CUDA_GRAPHS=0) with cuBLASLt's dWo; graphs off with smallk (64 and 32 CTAs).
source perf/device/common.sh
LIMIT=${LIMIT:-240}
P=$M/attnbwd_perf
abrun gqa_rope_backward 2,5,11,13,7 3 graphs-off-smallk 200 base="$P" g0="$P,ATTNBWD_CUDA_GRAPHS=0" \
  g0sk="$P,ATTNBWD_CUDA_GRAPHS=0,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk" \
  g0sk32="$P,ATTNBWD_CUDA_GRAPHS=0,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk,ATTNBWD_CUDA_GQA_DWO_SMS=32"
timeline gqa_rope_backward 11 gqa-11-g0-smallk ATTNBWD_CUDA_GRAPHS=0 ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
timeline gqa_rope_backward 11 gqa-11-g0 ATTNBWD_CUDA_GRAPHS=0
fin
