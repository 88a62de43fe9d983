# Forty-ninth session, call 4: where the small-K grad_o_weight kernel slows the small attention kernels (#11: the first
# kernel took 24.4 µs beside it against 9.5), by timelines with fewer CTAs and with the second kernel a plain launch;
# then #13 (the GEMM attention path, where smallk won 1.02x) at other CTA counts, A/B.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
timeline gqa_rope_backward 11 gqa-11-smallk-pdloff ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_SMALL_PDL=off
timeline gqa_rope_backward 11 gqa-11-smallk-32 ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=32
timeline gqa_rope_backward 11 gqa-11-smallk-16 ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16
timeline gqa_rope_backward 13 gqa-13-smallk-32 ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=32
abrun gqa_rope_backward 13,2 3 dwo-smallk-13 150 base="$P" smallk="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk" \
  sk32="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk,ATTNBWD_CUDA_GQA_DWO_SMS=32" \
  sk128="$P,ATTNBWD_CUDA_GQA_DWO_GEMM=smallk,ATTNBWD_CUDA_GQA_DWO_SMS=128"
fin
