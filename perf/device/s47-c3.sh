source perf/device/common.sh
LIMIT=${LIMIT:-560}
P=$M/attnbwd_perf
shards 'CudaGqaRope.*' 250
abrun gqa_rope_backward 0,1,7 3 gqa-dkdv-auto 70 auto=$P apart=$P,ATTNBWD_CUDA_GQA_DKDV=apart
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
  ok && PB suite-$op-2 $P $op all
done
suite_e $R/suite-*.json
fin
