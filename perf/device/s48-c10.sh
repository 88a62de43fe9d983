# Forty-eighth session, call 10 (bundle 74ec015: the spanned split built in): the thin kernel alone under ncu (kernels
# serialised: nothing beside it), plain split (auto) against span, at gqa #11 (MB = 2) and #13 (MB = 4): is the span's
# loss in the kernel itself, or in what shares the GPU with it?
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
for wl in 11 13; do
  for v in auto on; do
    ok && ATTNBWD_CUDA_THIN_SPAN=$v timeout "$(tmo 60)" ncu --kernel-name regex:linear_thin --launch-skip 4 --launch-count 2 \
      --clock-control none --section SpeedOfLight --section LaunchStats --section WarpStateStats --section Occupancy \
      "$P" --backend=cuda --ops=gqa_rope_backward --workloads=$wl --clock=events > "$R/ncu-$wl-$v.txt" 2>&1
    echo "ncu $wl $v rc=$? t=$SECONDS"
    grep -E "linear_thin|Duration|DRAM Throughput|Compute \(SM\) Throughput|Grid Size|Stall|Warp Cycles Per Issued" "$R/ncu-$wl-$v.txt" | head -24
  done
done
fin
