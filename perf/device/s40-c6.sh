# Fortieth session, call 6 (bundle of eaff4e5): early grad_o_weight sized for part of the SMs, dA for the rest
# (ATTNBWD_CUDA_GQA_DWO=early + ATTNBWD_CUDA_GQA_DWO_EARLY_SMS=N) against auto (late dWo, DWO_SMS auto) at small T.
# Prediction: at T = 128-293 (#2, #5, #7, #11, #13) dA (DRAM-bound on Wo) loses little on ~100 SMs and dWo is done
# before the chain: 1.00-1.04x at N = 32 or 48; at T = 512 (#12) dA is compute-heavier: ~1.00 or a loss.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DwoSmTargets*:CudaGqaRope.MalformedSwitches*' 60
E=ATTNBWD_CUDA_GQA_DWO=early
ok && timeout $(tmo 100) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,7,11,13,12 --rounds 2 \
  --variant auto=$P --variant e32=$P,$E,ATTNBWD_CUDA_GQA_DWO_EARLY_SMS=32 --variant e48=$P,$E,ATTNBWD_CUDA_GQA_DWO_EARLY_SMS=48 \
  --variant e66=$P,$E,ATTNBWD_CUDA_GQA_DWO_EARLY_SMS=66 --out $R/ab-early.json > $R/ab-early.txt 2>&1
echo "ab early rc=$? t=$SECONDS"; tail -10 $R/ab-early.txt
mkdir -p $R/tl
ok && env $E ATTNBWD_CUDA_GQA_DWO_EARLY_SMS=48 ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-e48.txt timeout $(tmo 30) $P \
  --backend=cuda --ops=gqa_rope_backward --workloads=13 > /dev/null 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-13-e48.txt > $R/tl/gqa-13-e48-print.txt 2>&1; head -16 $R/tl/gqa-13-e48-print.txt | cut -c1-150
fin
