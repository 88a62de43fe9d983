# Next call: perf/device/s54-c1.sh (below, a copy); rebundle first (bash perf/device/bundle.sh).
# Written in the fifty-third session for the next session's first call (bundle of HEAD): (1) the first GPU run of
# ATTNBWD_CUDA_MHA_MCAST=on (built, never run: a hang is possible, so its tests go first, alone, under a 90 s cap),
# (2) every CudaVisionMhaNorm test and the mha graph replays with TAIL = narrow and PTRIM = on by auto, (3) if (1)
# passed, the A/B MCAST on and pairs vs off at five mha workloads and #8's timelines, (4) on an H200 the four suites (the issue
# figures), elsewhere the mha suite.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
L=$M/attnbwd_perf
P=$L
ok && timeout "$(tmo 90)" "$M/attnbwd_tests" --gtest_filter='CudaVisionMhaNorm.Multicast*' > "$R/tests-mcast.txt" 2>&1
echo "mcast tests rc=$? t=$SECONDS"; grep -E "PASSED|FAILED|OK \]" "$R/tests-mcast.txt" | tail -8
mc_ok=0; grep -q "PASSED.*2 tests" "$R/tests-mcast.txt" && mc_ok=1
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*:-CudaVisionMhaNorm.Multicast*' 100
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
if [ $mc_ok = 1 ]; then
  abrun vision_mha_norm_backward 13,8,11,4,10 3 mcast 130 off="$L" on="$L,ATTNBWD_CUDA_MHA_MCAST=on" \
    pairs="$L,ATTNBWD_CUDA_MHA_MCAST=pairs"
  timeline vision_mha_norm_backward 8 mha-8-mcast ATTNBWD_CUDA_MHA_MCAST=on
  timeline vision_mha_norm_backward 8 mha-8-pairs ATTNBWD_CUDA_MHA_MCAST=pairs
  timeline vision_mha_norm_backward 8 mha-8-auto
fi
# gqa's large-S attention kernels at #6 (B = 1, S = 2048): L2-bound like mha's? (SOL, memory, scheduler sections)
for k in gqa_kv_attn_ws gqa_dp_softmax; do
  ok && timeout "$(tmo 60)" ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats \
    --clock-control none --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    "$P" --backend=cuda --ops=gqa_rope_backward --workloads=6 --clock=events > "$R/ncu-$k-6.txt" 2>&1
  echo "ncu $k rc=$? t=$SECONDS"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Issue Slots|L2 Hit|No Eligible" \
    "$R/ncu-$k-6.txt" | head -12
done
case $GPU in
  *H200*) suites 1 ;;
  *) ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all; suite_e "$R"/suite-*.json ;;
esac
fin
