# Fifty-ninth session, first call that ran (bundle 6d894a6, branch kvmid: auto's key-major path with the dQ pass also
# where S >= 256 and 512 <= T <= 4096; eea7b44: PV=side on the ws path keeps the dQ GEMM). 240e83d-f1361d5 and these
# never ran on a GPU:
# (1) every CUDA test in three shards; (2) A/B auto (new rule) / ATTN=gemm (the old auto there) at #3, #10, #12, #13
#     (T = 256: both gemm, a null pair), #15, five rounds; (3) on an H200 the four suites twice (issue figures), else
#     the gqa suite once.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
all_tests
abrun gqa_rope_backward 3,10,12,13,15 5 kvmid 150 auto="$P" gemm="$P,ATTNBWD_CUDA_GQA_ATTN=gemm"
suites_or gqa_rope_backward
fin
