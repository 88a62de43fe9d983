# Forty-first session, call 2 (bundle of the session's code after the timed-accumulating-GEMM lead was closed: the
# accumulating GEMMs untimed again, the test rewritten to that rule with a two-rounding tolerance; the PDL attribute
# helper). 1. The rewritten test and memcheck on it. 2. DWO=early (grad_o_weight on every SM from the op's start, beside
# dA: the chain and the merge then run without it) against auto (late, 66 SMs, beside the chain) at the small-T
# workloads #2, #5, #7, #11, #12, #13, two interleaved rounds. Prediction 0.97-1.02x (the thirty-second session's o-pair
# experiment: the chain clean 25 us against 42 at #13, but dWo's ~20 us then on the path). 3. Timeline of #13 with
# early; ncu of the merge pass at #13 alone (serialised: its uncontended length against 10 us in the call).
# 4. Suites of out_proj and gqa on an H200 only.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
shards 'CudaDeterminism.Accumulating*:CudaGqaRope.DxSumAcc*:CudaGqaRope.TunedGemms*' 90
ok && timeout $(tmo 60) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaDeterminism.Accumulating*' > $R/memcheck-acc.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-acc.txt | tail -3
ok && timeout $(tmo 90) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,7,11,12,13 --rounds 2 \
  --variant auto=$P --variant early=$P,ATTNBWD_CUDA_GQA_DWO=early --out $R/ab-dwo-early.json > $R/ab-dwo-early.txt 2>&1
echo "ab dwo-early rc=$? t=$SECONDS"; tail -9 $R/ab-dwo-early.txt
mkdir -p $R/tl
ok && env ATTNBWD_CUDA_GQA_DWO=early ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-early.txt timeout $(tmo 30) $P --backend=cuda \
  --ops=gqa_rope_backward --workloads=13 > /dev/null 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-13-early.txt > $R/tl/gqa-13-early-print.txt 2>&1; head -14 $R/tl/gqa-13-early-print.txt
ok && timeout $(tmo 60) ncu --kernel-name regex:gqa_rope_merge --launch-skip 3 --launch-count 1 --section SpeedOfLight \
  --section LaunchStats --section Occupancy $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=13 \
  > $R/ncu-merge-13.txt 2>&1
echo "ncu rc=$? t=$SECONDS"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" $R/ncu-merge-13.txt | head -8
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "gpu: $gpu"
case $gpu in
  *H200*)
    ok && PB suite-out_proj_backward $P out_proj_backward all
    ok && PB suite-gqa_rope_backward $P gqa_rope_backward all ;;
  *) echo "no suites: not an H200" ;;
esac
for op in out_proj_backward gqa_rope_backward; do [ -f $R/suite-$op.json ] && python3 - "$R/suite-$op.json" <<'PY' 2>&1 | tail -1
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))
PY
done
fin
