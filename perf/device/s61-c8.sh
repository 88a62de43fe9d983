# Sixty-first session, call 8 on (bundle of main, 9edade2; every CUDA test passed on it in call 3, an H100). Device time
# is short (≤ ~600 s), so on an H200 issue 6's list first, in order of need: the gqa suite twice (the issue figure),
# gqa's 16 workloads against the oracle, float64 PyTorch over them, the gqa sanitizer matrix, the stage split; then
# with what is left the other three ops' suites (README's table) and every CUDA test. Elsewhere nothing.
source perf/device/common.sh
P=$M/attnbwd_perf
case $GPU in
  *H200*)
    suites 2 gqa_rope_backward
    gqa_checks
    suites 1 out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward
    [ $((LIMIT - SECONDS)) -gt 150 ] && shards 'Cuda*:*Cuda*' $((LIMIT - SECONDS - 10))
    ;;
esac
fin
