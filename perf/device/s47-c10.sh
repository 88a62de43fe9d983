# Forty-seventh session, call 10: ATTNBWD_CUDA_GQA_SMALL_PDL=off (built this session, never run): its test and the
# neighbours it touches, then off against auto at the small-path workloads #2 #5 #11 (three rounds; with DWO_SMS=66
# too: grad_o_weight then fits the SMs the first kernel leaves empty), a timeline of #11 with off.
source perf/device/common.sh
LIMIT=${LIMIT:-150}
P=$M/attnbwd_perf
shards 'CudaGqaRope.SmallAttn*:CudaGqaRope.Malformed*:CudaGqaRope.SmallShapes*:CudaGqaRope.PvOnTheSide*' 70
abrun gqa_rope_backward 2,5,11 3 gqa-small-pdl 50 auto=$P off=$P,ATTNBWD_CUDA_GQA_SMALL_PDL=off off66=$P,ATTNBWD_CUDA_GQA_SMALL_PDL=off,ATTNBWD_CUDA_GQA_DWO_SMS=66
ok && timeline gqa_rope_backward 11 gqa-11-small-pdl-off ATTNBWD_CUDA_GQA_SMALL_PDL=off
fin
