# Next call: perf/device/s53-c4.sh (below, a copy).
# Fifty-third session, call 4 (bundle with ATTNBWD_CUDA_MHA_TAIL auto = narrow): what bounds mha's two warp-specialised
# attention kernels (ncu --set full, one launch each at #8, real clocks; the narrow tail cut their consumer work by
# 7.5 % and their time by 0.7-1.0 %), then every CudaVisionMhaNorm test and the mha graph replays with the new auto,
# and on an H200 the four suites (the issue figures).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
for k in attn_dq_ws attn_dkv_ws; do
  timeout "$(tmo 120)" ncu --set full --clock-control none --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    "$P" --backend=cuda --ops=vision_mha_norm_backward --workloads=8 --clock=events > "$R/ncu-$k-8.txt" 2>&1
  echo "ncu $k rc=$? t=$SECONDS"
  x="Duration|Elapsed Cycles|SM Frequency|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput|L1/TEX Cache"
  x="$x|L2 Cache Throughput|Issue Slots Busy|Issued Warp|No Eligible|Mem Busy|Max Bandwidth|Mem Pipes Busy|L2 Hit"
  grep -E "$x" "$R/ncu-$k-8.txt" | head -24
done
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 220
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
case $GPU in *H200*) suites 1 ;; esac
fin
