# Sixtieth session, call 4 (bundle of main: ATTNBWD_CUDA_GQA_DWQKV auto = batch where it fits). (0) every gqa CUDA test
# (the new auto checks in WeightGradientBatchMatchesTheOracle; DaAuto pins apart); (1) on an H200 the four suites twice
# (issue figures), elsewhere A/B auto (batch) / DWQKV=apart over all 16, three rounds, and the gqa suite once;
# (2) float64 PyTorch over all 16 gqa workloads and (3) the gqa sanitizer matrix, on the new default path.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
timeout "$(tmo 180)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.*' > "$R/tests-gqa.txt" 2>&1
echo "tests rc=$? t=$SECONDS"; grep -E "^\[ +(PASSED|FAILED)|Failure" -A6 "$R/tests-gqa.txt" | head -20
case $GPU in
  *H200*) suites 2 ;;
  *) abrun gqa_rope_backward all 3 dwqkv-auto 150 auto="$P" apart="$P,ATTNBWD_CUDA_GQA_DWQKV=apart"
     ok && PB suite-gqa_rope_backward-1 "$P" gqa_rope_backward all; suite_e "$R"/suite-*.json ;;
esac
torch_all gqa_rope_backward gqa
san_matrix gqa_rope_backward
fin
