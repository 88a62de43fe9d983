# Sixty-first session, call 8 on (bundle of main, 9edade2; every CUDA test passed on it in call 3, an H100). Device time
# is short (≤ ~600 s), so on an H200 issue 6's list first, in order of need: the gqa suite twice (the issue figure),
# gqa's 16 workloads against the oracle, float64 PyTorch over them, the gqa sanitizer matrix, the stage split; then
# with what is left the other three ops' suites (README's table) and every CUDA test. Elsewhere nothing.
source perf/device/common.sh
P=$M/attnbwd_perf
case $GPU in
  *H200*)
    for k in 1 2; do ok && PB "suite-gqa_rope_backward-$k" "$P" gqa_rope_backward all; done
    suite_e "$R"/suite-*.json
    ok && timeout "$(tmo 150)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.RealWorkloadsMatchTheOracle' \
      > "$R/tests-gqa-workloads.txt" 2>&1
    echo "workload test rc=$? t=$SECONDS"; grep -E "^\[ +(PASSED|FAILED)|Failure" -A6 "$R/tests-gqa-workloads.txt" | head
    torch_all gqa_rope_backward gqa
    san_matrix gqa_rope_backward
    stage_split gqa_rope_backward all gqa
    for op in out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward; do
      ok && PB "suite-$op-1" "$P" "$op" all
    done
    suite_e "$R"/suite-*.json
    [ $((LIMIT - SECONDS)) -gt 150 ] && shards 'Cuda*:*Cuda*' $((LIMIT - SECONDS - 10))
    ;;
esac
fin
