# Fifty-eighth session: what bounds gqa's q/k/v launch at small T (measure before a new kernel shape is counted).
# The fifty-first session's count says the thin kernel (T <= 256) is shared-memory-bound (m64n128 products with both
# operands in shared memory: ~96 of 128 B/clk) and the grouped kernel at #7 (T = 293) runs at ~490 TFLOP/s; neither
# was profiled since thin v4. ncu (one cold call through the CLI, real clocks) on: thin at #13 (T = 256) and #11
# (T = 128), grouped at #7; sections SOL, compute, memory (+ tables: shared-memory wavefronts and bank conflicts),
# warp states. Then on an H200 the four suites twice (issue figures), elsewhere nothing more.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
prof() {  # prof WORKLOAD KERNEL_REGEX NAME
  ok || return 0
  "$M/attnbwd" gen gqa_rope_backward --workload "$1" -o "/tmp/gqa-$1.safetensors" > /dev/null 2>&1
  timeout "$(tmo 90)" ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy --clock-control none \
    --kernel-name "regex:$2" --launch-count 1 "$M/attnbwd" run gqa_rope_backward -i "/tmp/gqa-$1.safetensors" \
    -o "/tmp/gqa-$1-out.safetensors" > "$R/ncu-$3.txt" 2>&1
  echo "ncu $3 rc=$? t=$SECONDS"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Shared|Bank|Stall|Issue Slots|Tensor|Pipe" \
    "$R/ncu-$3.txt" | head -24
}
prof 13 linear_thin_kernel thin-13
prof 11 linear_thin_kernel thin-11
prof 7 linear_backward_grouped thin-7-grouped
case $GPU in
  *H200*) suites 2 ;;
esac
fin
