# Thirty-sixth session, call 3: ncu (full set) of the dP + softmax kernel's v3 at gqa #0 (narrow form), then one
# suite run of each op at d5fcd55 (the first measurement of 345e9b2: gemm_half, sms_of_132).
source perf/device/common.sh
LIMIT=${LIMIT:-330}
P=$M/attnbwd_perf
ATTNBWD_CUDA_GQA_DPSM=on timeout $(tmo 90) ncu --set full --kernel-name regex:gqa_dp_softmax --launch-count 1 \
  $P --backend=cuda --ops=gqa_rope_backward --workloads=0 --clock=events > $R/ncu-dpsm-v3-gqa0.txt 2>&1
echo "ncu rc=$? t=$SECONDS"; grep -E "Duration|Issued Warp|DRAM Throughput|No Eligible|Executed Ipc A" $R/ncu-dpsm-v3-gqa0.txt | head -8
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op $P $op all
  python3 - "$R/suite-$op.json" <<'PY' 2>/dev/null
import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "geomean E %.4f" % math.exp(sum(map(math.log, e)) / len(e)))
PY
done
fin
