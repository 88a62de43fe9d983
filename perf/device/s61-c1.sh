# Written in the sixtieth session for the next session's first call (rebundle first: bash perf/device/bundle.sh).
# No H200 came in the fifty-eighth to sixtieth sessions; main's gqa (the dQ pass, auto's key-major rule from S = 256,
# DWQKV auto = batch) passed every check on H100s and predicts ~0.558 on an H200 (target 0.55). On an H200, issue 6's
# whole list in one call: (1) the four suites twice (issue figures); (2) gqa's 16 workloads against the oracle;
# (3) float64 PyTorch over them; (4) the gqa sanitizer matrix; (5) the gqa stage split; (6) every CUDA test in three
# shards with what is left. Elsewhere (an H100) only the gqa suite and the stage split (short: device time).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
case $GPU in
  *H200*)
    suites 2
    gqa_checks
    [ $((LIMIT - SECONDS)) -gt 200 ] && shards 'Cuda*:*Cuda*' $((LIMIT - SECONDS - 10))
    ;;
  *) suites 1 gqa_rope_backward
     stage_split gqa_rope_backward all gqa ;;
esac
fin
