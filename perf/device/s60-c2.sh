# Written in the fifty-ninth session for the next session's second call: DWQKV=batch over the workloads where it
# applies, five interleaved rounds (the fifty-ninth session's H100s: 0.995-1.011x in three rounds, #3 slower twice).
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
abrun gqa_rope_backward 0,1,3,4,6,8,9,10,12,14,15 5 dwqkv 190 apart="$P" batch="$P,ATTNBWD_CUDA_GQA_DWQKV=batch"
fin
