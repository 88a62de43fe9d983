# Thirty-ninth session, call 1 (the session has 30 min of device time, 110 s of it spent on two refused starts; so the
# prepared next-c1/c2/c4 are folded into two calls, gqa only: the one op within reach of its target).
# 1. gqa's CUDA tests in three shards (every test since 74e90de's last GPU run: ROWS, the switches read at the op's
#    start, PvOnTheSideStreamMatchesTheOracle, KvWeightGradientsUnderDqMatchTheOracle).
# 2. The key-major path (#4, #6, #9, #14): main against O on the side stream (PV=side), the k/v weight gradients
#    under the dQ GEMM (KVW=under), and both; two interleaved rounds. Prediction: side -20..-40 us at #6, #9;
#    under -30..-45 us at #6, #9; both roughly additive (different phases: O beside dA, dWk/dWv beside dQ).
# 3. The small kernels' path (#2, #5, #11): main, side (PV_SMS auto 8-39), side at 16. Prediction: -2..-4 us a call.
# 4. The GEMM path (nine workloads): auto (ROWS 1, dpsm at #7 only), ROWS=4, dpsm on + side, on3 + side.
#    Prediction: ROWS 4 up to -20 us at #0 if the row kernel was latency-bound beside dWo, else 1.00;
#    on+side ahead of auto by 5-10 us at #0, #1, #10 and ~10 us at #7.
source perf/device/common.sh
LIMIT=${LIMIT:-575}
P=$M/attnbwd_perf
PV=ATTNBWD_CUDA_GQA_PV
shards 'CudaGqaRope.*' 230
ok && timeout $(tmo 125) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 4,6,9,14 --rounds 2 \
  --variant main=$P --variant side=$P,$PV=side --variant under=$P,ATTNBWD_CUDA_GQA_KVW=under \
  --variant both=$P,$PV=side,ATTNBWD_CUDA_GQA_KVW=under --out $R/ab-kv.json > $R/ab-kv.txt 2>&1
echo "ab kv rc=$? t=$SECONDS"; tail -9 $R/ab-kv.txt
ok && timeout $(tmo 70) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11 --rounds 2 \
  --variant main=$P --variant side=$P,$PV=side --variant s16=$P,$PV=side,${PV}_SMS=16 \
  --out $R/ab-pv-small.json > $R/ab-pv-small.txt 2>&1
echo "ab pv small rc=$? t=$SECONDS"; tail -7 $R/ab-pv-small.txt
ok && timeout $(tmo 160) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,7,8,10,12,13,15 --rounds 2 \
  --variant auto=$P --variant r4=$P,ATTNBWD_CUDA_GQA_ROWS=4 --variant onpv=$P,ATTNBWD_CUDA_GQA_DPSM=on,$PV=side \
  --variant on3pv=$P,ATTNBWD_CUDA_GQA_DPSM=on3,$PV=side --out $R/ab-gemm.json > $R/ab-gemm.txt 2>&1
echo "ab gemm rc=$? t=$SECONDS"; tail -14 $R/ab-gemm.txt
fin
