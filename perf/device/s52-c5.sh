# Fifty-second session, call 5: ATTNBWD_CUDA_GQA_DWO=first (grad_o_weight forked after the small path's first kernel,
# so that it starts on the SMs that kernel frees, with nothing of it resident beside it) — its test and neighbours, then
# the A/B at the small path (#2, #5, #11) by cuBLASLt and by the small-K kernel, against auto and late smallk; #11's
# timelines; on an H200, within the limit, the suites once. Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-240}
L=$M/attnbwd_perf
P=$L
shards 'CudaGqaRope.DwoForked*:CudaGqaRope.LateGradOWeight*:CudaGqaRope.DwoSmallK*:CudaGraphs.Gqa*' 80
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
F=ATTNBWD_CUDA_GQA_DWO=first
SK=ATTNBWD_CUDA_GQA_DWO_GEMM=smallk
abrun gqa_rope_backward 2,5,11 3 dwo-first 90 base="$L" first="$L,$F" firstsk="$L,$F,$SK" latesk="$L,$SK"
timeline gqa_rope_backward 11 gqa-11-firstsk $F $SK
timeline gqa_rope_backward 11 gqa-11-first $F
timeline gqa_rope_backward 11 gqa-11-auto
case $GPU in *H200*) suites 1 ;; esac
fin
