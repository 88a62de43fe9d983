# Fifty-eighth session: KVDQ's dQ pass, second form (each tile's (P⊙dP)·K and P·K products left running across the
# tile barrier, K's tiles in a ring of four; 233 registers). Call 9 measured the first form correct and 1.003-1.012x.
# (1) its test alone; (2) if it passed: interleaved rounds off / on at #4, #6, #9, #14, #6's timeline with on, and
# ncu (SOL, compute, warp states) of the dQ pass at #6; (3) on an H200 the four suites twice.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
ok && timeout "$(tmo 150)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.KeyMajorDqPass*' > "$R/tests-kvdq.txt" 2>&1
echo "kvdq test rc=$? t=$SECONDS"; grep -E "PASSED|FAILED|OK \]|Failure" "$R/tests-kvdq.txt" | head -8
if grep -q "PASSED.*1 test" "$R/tests-kvdq.txt"; then
  abrun gqa_rope_backward 4,6,9,14 3 kvdq2 170 off="$P" on="$P,ATTNBWD_CUDA_GQA_KVDQ=on"
  timeline gqa_rope_backward 6 gqa-6-kvdq2 ATTNBWD_CUDA_GQA_KVDQ=on
  if ok; then
    "$M/attnbwd" gen gqa_rope_backward --workload 6 -o /tmp/gqa-6.safetensors > /dev/null 2>&1
    ATTNBWD_CUDA_GQA_KVDQ=on timeout "$(tmo 90)" ncu --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --clock-control none --kernel-name regex:gqa_dp_softmax \
      --launch-count 1 "$M/attnbwd" run gqa_rope_backward -i /tmp/gqa-6.safetensors -o /tmp/gqa-6-out.safetensors \
      > "$R/ncu-kvdq-6.txt" 2>&1
    echo "ncu kvdq-6 rc=$? t=$SECONDS"
    grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issue Slots|Stall|highest-utilized" \
      "$R/ncu-kvdq-6.txt" | head -12
  fi
fi
case $GPU in
  *H200*) suites 2 ;;
esac
fin
