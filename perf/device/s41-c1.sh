# Forty-first session, call 1 (bundle ff52690: accumulating cuBLASLt GEMMs timed on a scratch; the PDL attribute helper).
# Tests: the new AccumulatingGemmIsTimedOnAScratchAndAddsOnce and every determinism test (LT tuning rules), gqa's acc,
# tuned-GEMM, switch and PDL-launch tests; memcheck on the new test. Then ATTNBWD_CUDA_LT_TUNE=beta0 (the old rule: the
# beta = 1 dXk/dXv GEMMs untimed) against auto on the separate-path workloads #0, #1, #4, #12, three interleaved rounds.
# Prediction: 1.003-1.01x (the fortieth session's #0 timeline: each acc GEMM 1.5-1.9 us slower than its timed
# overwrite form). The choices printed at #0 (verbose), float64 PyTorch #0 and #12, timelines of #12 and #13 (PDL off:
# the merge's length without the thin launch's prologue beside it), and the gqa suite.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaDeterminism.*:CudaGqaRope.DxSumAcc*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.TunedGemms*:CudaGqaRope.QkvLaunches*' 150
ok && timeout $(tmo 60) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaDeterminism.Accumulating*' > $R/memcheck-acc.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-acc.txt | tail -3
ok && timeout $(tmo 80) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,4,12 --rounds 3 \
  --variant beta0=$P,ATTNBWD_CUDA_LT_TUNE=beta0 --variant auto=$P --out $R/ab-acc-tune.json > $R/ab-acc-tune.txt 2>&1
echo "ab acc-tune rc=$? t=$SECONDS"; tail -7 $R/ab-acc-tune.txt
ok && env ATTNBWD_CUDA_LT_TUNE=verbose timeout $(tmo 30) $P --backend=cuda --ops=gqa_rope_backward --workloads=0 \
  > $R/verbose-0.txt 2>&1; grep "lt_tune" $R/verbose-0.txt | head -20
for w in 0 12; do
  ok && timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd --ops 003 --workloads $w \
    --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -2 $R/torch-$w.txt
done
mkdir -p $R/tl
for v in 12:auto 13:auto 13:off; do
  w=${v%%:*}; pdl=${v##*:}
  ok && env ATTNBWD_CUDA_GQA_PDL=$pdl ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$w-$pdl.txt timeout $(tmo 30) $P --backend=cuda \
    --ops=gqa_rope_backward --workloads=$w > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$w-$pdl.txt > $R/tl/gqa-$w-$pdl-print.txt 2>&1
done
echo "tl t=$SECONDS"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "gpu: $gpu"
case $gpu in *H200*) ok && PB suite-gqa_rope_backward $P gqa_rope_backward all ;; *) echo "no suite: not an H200" ;; esac
python3 - "$R/suite-gqa_rope_backward.json" <<'PY' 2>&1 | tail -1
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))
PY
fin
