# Fifty-eighth session: (1) on any card, the mha tests whose helper 4f16d83 refactored (NarrowTail, DeltaCopies: they
# last ran on dc36286's bundle, before the refactor) on this bundle (acf0cea = HEAD's code); (2) only on an H200, the
# four suites twice (issue figures) and ncu of the thin kernel at gqa #11 (its L2 share there: 80 % on an H100).
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
ok && timeout "$(tmo 60)" "$M/attnbwd_tests" \
  --gtest_filter='CudaVisionMhaNorm.NarrowTail*:CudaVisionMhaNorm.DeltaCopies*' > "$R/tests-mha-ws.txt" 2>&1
echo "mha ws tests rc=$? t=$SECONDS"; grep -E "OK \]|PASSED|FAILED" "$R/tests-mha-ws.txt"
case $GPU in
  *H200*) ;;
  *) echo "not an H200: nothing more"; fin; exit 0 ;;
esac
suites 2
if ok; then
  "$M/attnbwd" gen gqa_rope_backward --workload 11 -o /tmp/gqa-11.safetensors > /dev/null 2>&1
  timeout "$(tmo 60)" ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --clock-control none \
    --kernel-name regex:linear_thin_kernel --launch-count 1 "$M/attnbwd" run gqa_rope_backward \
    -i /tmp/gqa-11.safetensors -o /tmp/gqa-11-out.safetensors > "$R/ncu-thin-11.txt" 2>&1
  echo "ncu thin-11 rc=$? t=$SECONDS"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Memory Throughput" "$R/ncu-thin-11.txt"
fi
fin
