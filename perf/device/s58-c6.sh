# Fifty-eighth session: issue figures, only if the machine is an H200 (calls 1-5 all got H100s): the four suites twice
# on HEAD's code (bundle acf0cea = dc36286's kernels), then ncu (SOL, memory) of the thin kernel at gqa #11 to see
# whether its L2 share is higher on the H200's faster DRAM than the H100's 80 %. On any other card it stops at once.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
case $GPU in
  *H200*) ;;
  *) echo "not an H200: nothing run"; fin; exit 0 ;;
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
