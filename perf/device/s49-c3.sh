# Forty-ninth session, call 3: why the small-K grad_o_weight kernel runs at ~45 % of its SMs' tensor rate (ncu, full
# set, one launch at #11 and #13, real clocks), and each kernel's duration alone (ncu serialises them) at #11 with
# cuBLASLt's dWo against smallk, to tell the kernel's own time from what it does to the attention beside it.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
for wl in 11 13; do
  ATTNBWD_CUDA_GQA_DWO_GEMM=smallk timeout "$(tmo 120)" ncu --set full --clock-control none \
    --kernel-name regex:wgrad_small_k --launch-skip 3 --launch-count 1 \
    "$P" --backend=cuda --ops=gqa_rope_backward --workloads=$wl --clock=events > "$R/ncu-smallk-$wl.txt" 2>&1
  echo "ncu $wl rc=$? t=$SECONDS"
  k="^  [a-z_]+.*\(|Duration|Elapsed Cycles|SM Frequency|Compute \(SM\) Throughput|DRAM Throughput"
  k="$k|Memory Throughput|L2 Cache Throughput|Issued Warp|No Eligible|Registers Per|Achieved Occupancy"
  grep -E "$k" "$R/ncu-smallk-$wl.txt" | head -16
done
for v in cublaslt smallk; do
  ATTNBWD_CUDA_GQA_DWO_GEMM=$v timeout "$(tmo 120)" ncu --clock-control none --launch-skip 16 --launch-count 16 \
    --metrics gpu__time_duration.sum,dram__bytes.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
    "$P" --backend=cuda --ops=gqa_rope_backward --workloads=11 --clock=events > "$R/ncu-k11-$v.txt" 2>&1
  echo "ncu k11 $v rc=$? t=$SECONDS"
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration|tensor_op|dram__bytes" "$R/ncu-k11-$v.txt" | sed 's/  */ /g' |
    cut -c1-150 | head -40
done
fin
