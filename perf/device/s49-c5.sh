# Forty-ninth session, call 5: grad_o_weight by the small-K kernel from the op's start, beside dA on the SMs its grid
# leaves (ATTNBWD_CUDA_GQA_DWO=early + DWO_GEMM=smallk: dA's cuBLASLt target = the rest), so that nothing runs beside
# the small attention kernels (which the kernel, like cuBLASLt's dWo, slowed ~2.5x in call 4 even on 16 SMs).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
E="ATTNBWD_CUDA_GQA_DWO=early,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
abrun gqa_rope_backward 11,5,2,13 3 dwo-early-smallk 200 base="$P" e64="$P,$E" e48="$P,$E,ATTNBWD_CUDA_GQA_DWO_SMS=48" \
  e80="$P,$E,ATTNBWD_CUDA_GQA_DWO_SMS=80" late64="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
timeline gqa_rope_backward 11 gqa-11-early-smallk ATTNBWD_CUDA_GQA_DWO=early ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
timeline gqa_rope_backward 13 gqa-13-early-smallk ATTNBWD_CUDA_GQA_DWO=early ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
fin
