# Fifty-third session, call 12: ATTNBWD_CUDA_MHA_PTRIM=on (P's TMA boxes trimmed to what lies inside S; the kernels are
# L2-bound by call 10's ncu) — its tests and the neighbours first, then the A/B against off (auto) at five mha
# workloads, ncu's speed-of-light section on both kernels at #8 with on, float64 PyTorch at #8 with on.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
L=$M/attnbwd_perf
P=$L
F='CudaVisionMhaNorm.NarrowTail*:CudaVisionMhaNorm.PTrim*:CudaVisionMhaNorm.WarpSpecialised*'
shards "$F:CudaVisionMhaNorm.FusedLaunch*" 80
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
abrun vision_mha_norm_backward 13,8,11,4,10 3 ptrim 70 off="$L" on="$L,ATTNBWD_CUDA_MHA_PTRIM=on"
for k in attn_dq_ws attn_dkv_ws; do
  ATTNBWD_CUDA_MHA_PTRIM=on timeout "$(tmo 40)" ncu --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --clock-control none --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    "$P" --backend=cuda --ops=vision_mha_norm_backward --workloads=8 --clock=events > "$R/ncu-$k-8-ptrim.txt" 2>&1
  echo "ncu $k rc=$? t=$SECONDS"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit Rate|Memory Throughput" "$R/ncu-$k-8-ptrim.txt" | head -6
done
torch_check vision_mha_norm_backward 8 ATTNBWD_CUDA_MHA_PTRIM=on
fin
