# Fifty-eighth session: does the key-major path with the dQ pass (KVDQ = ws) now beat auto's GEMM path below S = 1024?
# (auto takes kvws only from S = 1024; the ninth session measured the key-major path 0.95-0.98x at S <= 512, before the
# dQ pass.) Interleaved rounds auto / ATTN=kvws / kvws with KVDQ=off at the S % 128 == 0 workloads under 1024: #3
# (B = 16, S = 256), #10 (B = 8, S = 384), #12 (S = 512), #13 (S = 256), #15 (B = 4, S = 512). On an H200 also the gqa
# suite twice (issue figure) first.
source perf/device/common.sh
LIMIT=${LIMIT:-130}
P=$M/attnbwd_perf
case $GPU in
  *H200*) for k in 1 2; do ok && PB "suite-gqa_rope_backward-$k" "$P" gqa_rope_backward all; done; suite_e "$R"/suite-*.json ;;
esac
abrun gqa_rope_backward 3,10,12,13,15 3 kvws-mid 120 auto="$P" kvws="$P,ATTNBWD_CUDA_GQA_ATTN=kvws" \
  kvws_nodq="$P,ATTNBWD_CUDA_GQA_ATTN=kvws,ATTNBWD_CUDA_GQA_KVDQ=off"
fin
