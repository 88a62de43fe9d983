# Forty-fifth session, call 4: s45-c3.sh cut to what the device time left allows (~250 s): the tests of the two new
# autos first (gqa DA auto; varlen vec1 + side, whose tests had never run on a GPU), then float64 PyTorch on the changed
# workloads, then the A/Bs of the new autos against the old forms.
source perf/device/common.sh
LIMIT=${LIMIT:-250}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DaAuto*:CudaGqaRope.DaHeads*:CudaVisionVarlenRope.BiasRope*:CudaVisionVarlenRope.BlockTable*:CudaVisionVarlenRope.Lt16*:CudaVisionVarlenRope.Odd*' 90
torch_check gqa_rope_backward 15
torch_check vision_varlen_rope_backward 8
torch_check vision_varlen_rope_backward 10
abrun gqa_rope_backward 3,8,9,10,14,15 2 gqa-da-auto 50 auto=$P copy=$P,ATTNBWD_CUDA_GQA_DA=cublaslt
abrun vision_varlen_rope_backward all 2 varlen-auto 80 auto=$P old=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec,ATTNBWD_CUDA_VARLEN_TABLE=main
fin
