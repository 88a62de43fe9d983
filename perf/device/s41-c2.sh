# Forty-first session, call 2 (bundle of the session's code after the timed-accumulating-GEMM lead was closed: the
# accumulating GEMMs untimed again, the test rewritten to that rule with a two-rounding tolerance; the PDL attribute
# helper). 1. The rewritten test and memcheck on it. 2. DWO=early (grad_o_weight on every SM from the op's start, beside
# dA: the chain and the merge then run without it) against auto (late, 66 SMs, beside the chain) at the small-T
# workloads #2, #5, #7, #11, #12, #13, two interleaved rounds. Prediction 0.97-1.02x (the thirty-second session's o-pair
# experiment: the chain clean 25 us against 42 at #13, but dWo's ~20 us then on the path). 3. Timeline of #13 with
# early; ncu of the merge pass at #13 alone (serialised: its uncontended length against 10 us in the call).
# 4. Suites of out_proj and gqa on an H200 only.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
shards 'CudaDeterminism.Accumulating*:CudaGqaRope.DxSumAcc*:CudaGqaRope.TunedGemms*' 90
sanitize memcheck 'CudaDeterminism.Accumulating*' acc 60
abrun gqa_rope_backward 2,5,7,11,12,13 2 dwo-early 90 auto=$P early=$P,ATTNBWD_CUDA_GQA_DWO=early
timeline gqa_rope_backward 13 gqa-13-early ATTNBWD_CUDA_GQA_DWO=early
ok && timeout $(tmo 60) ncu --kernel-name regex:gqa_rope_merge --launch-skip 3 --launch-count 1 --section SpeedOfLight \
  --section LaunchStats --section Occupancy $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=13 \
  > $R/ncu-merge-13.txt 2>&1
echo "ncu rc=$? t=$SECONDS"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" $R/ncu-merge-13.txt | head -8
case $GPU in
  *H200*)
    ok && PB suite-out_proj_backward $P out_proj_backward all
    ok && PB suite-gqa_rope_backward $P gqa_rope_backward all ;;
  *) echo "no suites: not an H200" ;;
esac
suite_e $R/suite-out_proj_backward.json $R/suite-gqa_rope_backward.json
fin
