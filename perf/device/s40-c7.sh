# Fortieth session, call 7 (bundle of the grouped launch's PDL): tests (the new PDL test, gqa graphs, out_proj: the
# producer's griddep_wait is in every linear_backward launch), memcheck on the new test; #7 (the only workload on the
# grouped q/k/v launch) PDL auto against thin (the grouped launch plain, as before), three interleaved rounds, with #12
# as a control (no grouped launch: ~1.00). Prediction: #7 -1..-4 us (1.005-1.02x). Then the out_proj and gqa suites.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
shards 'CudaGqaRope.QkvLaunches*:CudaGqaRope.MalformedSwitches*:CudaGraphs.Gqa*:CudaOutProj.*' 120
ok && timeout $(tmo 60) compute-sanitizer --tool memcheck --error-exitcode 9 $M/attnbwd_tests \
  --gtest_filter='CudaGqaRope.QkvLaunches*' > $R/memcheck-pdl.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pdl.txt | tail -3
ok && timeout $(tmo 60) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 7,12 --rounds 3 \
  --variant thin=$P,ATTNBWD_CUDA_GQA_PDL=thin --variant auto=$P --out $R/ab-pdl.json > $R/ab-pdl.txt 2>&1
echo "ab pdl rc=$? t=$SECONDS"; tail -5 $R/ab-pdl.txt
ok && PB suite-out_proj_backward $P out_proj_backward all
ok && PB suite-gqa_rope_backward $P gqa_rope_backward all
for op in out_proj_backward gqa_rope_backward; do python3 - "$R/suite-$op.json" <<'PY' 2>&1 | tail -1
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))
PY
done
fin
