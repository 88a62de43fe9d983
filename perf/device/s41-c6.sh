# Forty-first session, call 6 (bundle of the session's last code; default paths as a594b9d's but for the PDL attribute
# helper): the out_proj and gqa suites, on an H200 only (elsewhere it stops at once).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "gpu: $gpu"
case $gpu in *H200*) ;; *) echo "not an H200: no suites"; fin; exit 0 ;; esac
ok && PB suite-out_proj_backward $P out_proj_backward all
ok && PB suite-gqa_rope_backward $P gqa_rope_backward all
for op in out_proj_backward gqa_rope_backward; do [ -f $R/suite-$op.json ] && python3 - "$R/suite-$op.json" <<'PY' 2>&1 | tail -1
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))
PY
done
fin
