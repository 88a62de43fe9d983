# Next session, call 2: depends on call 1 (its tests include CudaGqaRope.PvOnTheSideStreamMatchesTheOracle, the first
# GPU run of ATTNBWD_CUDA_GQA_PV). With ROWS=${ROWS:-4} (the winner of call 1; set ROWS=1 if none won):
# 1. O = bf16(P·V) on the side stream beside dA (ATTNBWD_CUDA_GQA_PV=side, thirty-eighth session) on its three paths,
#    two interleaved rounds each, against today's defaults:
#    - the GEMM path's dP + softmax kernel (r from O: pass 2 alone) in its two-CTA (on) and three-CTA (on3) forms
#      against the pair (off) and the kernels with their own first pass, on the nine GEMM-path workloads. Prediction:
#      the kernel 90.8 -> ~50-55 us at #0 (half its products and one read of P), so on+side ahead of off by ~5-10 us at
#      #0, #1, #10 and ~10 us at #7; on3 (without side) as the thirty-seventh session predicted (>= on).
#    - the small kernels' path (#2, #5, #11; r from O: the first kernel's first sweep gone), PV_SMS auto (8), 16, 32.
#      Prediction: -2 to -4 us per call (the first kernel ~10 -> ~7 us) unless dA on 116 SMs loses more.
#    - the key-major path (#4, #6, #9, #14; O beside dA instead of after it), PV_SMS auto (28-47), 20, 64. Prediction:
#      -20 to -40 us at #6 and #9, -10 to -20 at #14, -5 to -10 at #4 (O's DRAM-bound 96-118 us under dA's compute).
# 2. Timelines of #0 (on + side), #11 and #6 (side); memcheck on the PV test (the O kernel and r from O in three forms).
# The suites are call 3 (next-c3.sh), after the winners are made auto and the bundle is remade. Left for a later call
# (next-c4.sh): the k/v weight gradients under the dQ GEMM (ATTNBWD_CUDA_GQA_KVW), racecheck on the new kernels' tests,
# groupeddx at 385 <= T < 2048, on3's occupancy, the late dWo's SM target re-swept with the winning ROWS.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
RW=${ROWS:-4}
PV=ATTNBWD_CUDA_GQA_PV
ok && timeout $(tmo 190) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,7,8,10,12,13,15 --rounds 2 \
  --variant off=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DPSM=off --variant on=$P,ATTNBWD_CUDA_GQA_DPSM=on \
  --variant onpv=$P,ATTNBWD_CUDA_GQA_DPSM=on,$PV=side --variant on3=$P,ATTNBWD_CUDA_GQA_DPSM=on3 \
  --variant on3pv=$P,ATTNBWD_CUDA_GQA_DPSM=on3,$PV=side --out $R/ab-dpsm-pv.json > $R/ab-dpsm-pv.txt 2>&1
echo "ab dpsm pv rc=$? t=$SECONDS"; tail -16 $R/ab-dpsm-pv.txt
ok && timeout $(tmo 80) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11 --rounds 2 \
  --variant main=$P --variant side=$P,$PV=side --variant s16=$P,$PV=side,${PV}_SMS=16 \
  --variant s32=$P,$PV=side,${PV}_SMS=32 --out $R/ab-pv-small.json > $R/ab-pv-small.txt 2>&1
echo "ab pv small rc=$? t=$SECONDS"; tail -8 $R/ab-pv-small.txt
ok && timeout $(tmo 110) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 4,6,9,14 --rounds 2 \
  --variant main=$P --variant side=$P,$PV=side --variant s20=$P,$PV=side,${PV}_SMS=20 \
  --variant s64=$P,$PV=side,${PV}_SMS=64 --out $R/ab-pv-kv.json > $R/ab-pv-kv.txt 2>&1
echo "ab pv kv rc=$? t=$SECONDS"; tail -8 $R/ab-pv-kv.txt
mkdir -p $R/tl
for v in "0 on side" "11 auto side" "6 auto side"; do
  set -- $v
  ok && env ATTNBWD_CUDA_GQA_DPSM=$2 $PV=$3 ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$1-$2-$3.txt timeout $(tmo 60) $P \
    --backend=cuda --ops=gqa_rope_backward --workloads=$1 > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$1-$2-$3.txt > $R/tl/gqa-$1-$2-$3-print.txt 2>&1
  grep -E "span|dp_softmax|nvjet" $R/tl/gqa-$1-$2-$3-print.txt | head -5
done
T=$M/attnbwd_tests
ok && timeout $(tmo 80) compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.PvOnTheSideStream*' > $R/memcheck-pv.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pv.txt | tail -3
fin
