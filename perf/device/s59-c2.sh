# Written in the fifty-eighth session for the next session's second call: auto's key-major rule below S = 1024. Call 16
# measured ATTN=kvws (with the dQ pass) against auto's GEMM path on an H100: #3 1.017x, #10 1.008x, #12 1.031x, #15
# 1.043x, #13 (T = 256) 0.990x. Before flipping auto (kvws where S % 128 == 0, S >= 256, 512 <= T <= 4096), measure
# again in the same call on the card that comes, with more rounds: auto / kvws at those five workloads.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
abrun gqa_rope_backward 3,10,12,13,15 5 kvws-mid 190 auto="$P" kvws="$P,ATTNBWD_CUDA_GQA_ATTN=kvws"
fin
