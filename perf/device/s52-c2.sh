# Fifty-second session, call 2: ATTNBWD_CUDA_GQA_PAD=beside (Q, K, V padded copies on the side stream beside dA, dO's
# alone after it) — its test and the neighbours first, then the A/B against auto (after) on the three padded GEMM-path
# workloads (#7 S = 293, #0 S = 691, #1 B = 2 S = 449), #7's timelines, and on an H200 the four suites (the issue
# figures). Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
L=$M/attnbwd_perf
P=$L
shards 'CudaGqaRope.PadBeside*:CudaGqaRope.Malformed*:CudaGqaRope.DkDv*' 150
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
abrun gqa_rope_backward 7,0,1 3 pad 120 base="$L" beside="$L,ATTNBWD_CUDA_GQA_PAD=beside"
timeline gqa_rope_backward 7 gqa-7-beside ATTNBWD_CUDA_GQA_PAD=beside
timeline gqa_rope_backward 7 gqa-7-auto
case $GPU in *H200*) suites 1 ;; esac
fin
