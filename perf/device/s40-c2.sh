# Fortieth session, call 2 (bundle of fd8c806: DXSUM auto = acc on the separate cuBLASLt q/k/v path):
# 1. gqa's CUDA tests in three shards (every gqa test: the new default runs through all of them) with the determinism,
#    graph and concurrency tests of gqa;
# 2. add3 against auto (acc) on the separate-path workloads #0, #1, #4, #12, two interleaved rounds (call 1: 1.002-1.014x);
# 3. the gqa suite (all 16, one run) for the record; float64 PyTorch on #1 and #4 with the default.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.*:CudaDeterminism.Gqa*:CudaGraphs.Gqa*:CudaConcurrency.Gqa*' 250
ok && timeout $(tmo 50) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,4,12 --rounds 2 \
  --variant add3=$P,ATTNBWD_CUDA_GQA_DXSUM=add3 --variant auto=$P --out $R/ab-dxsum2.json > $R/ab-dxsum2.txt 2>&1
echo "ab dxsum rc=$? t=$SECONDS"; tail -7 $R/ab-dxsum2.txt
ok && PB suite-gqa_rope_backward $P gqa_rope_backward all
python3 - "$R/suite-gqa_rope_backward.json" <<'PY' 2>&1 | tail -3
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))
PY
ok && timeout $(tmo 60) python3 tests/torch/check_workloads.py --cli $M/attnbwd --ops 003 --workloads 1,4 --backend cuda \
  --solexec .carry/solexec --no-emulated > $R/torch-1-4.txt 2>&1
echo "torch rc=$? t=$SECONDS"; tail -2 $R/torch-1-4.txt
fin
