source perf/device/common.sh
LIMIT=${LIMIT:-560}
P=$M/attnbwd_perf
shards 'CudaGqaRope.*' 250
abrun gqa_rope_backward 0,1,7 3 gqa-dkdv-auto 70 auto=$P apart=$P,ATTNBWD_CUDA_GQA_DKDV=apart
suites 2
fin
