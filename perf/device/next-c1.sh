# Next session, call 1 (planned in the thirty-seventh session, which had no GPU): the first GPU run of 74e90de..HEAD.
# 1. gqa's CUDA tests in three shards (74e90de's review mends; the row kernel's rows per warp, ATTNBWD_CUDA_GQA_ROWS;
#    the switches read at the op's start with untouched outputs on refusal; the thirty-eighth session's O on the side
#    stream, ATTNBWD_CUDA_GQA_PV, with r from O in the small and dP + softmax kernels: PvOnTheSideStreamMatchesTheOracle)
#    and varlen's bias + RoPE tests (vec1).
# 2. A/B ROWS 1 / 2 / 4 / 8 on the eight GEMM-path workloads that run the row kernel (#7 takes the dP + softmax
#    kernel), two interleaved rounds. Prediction: 1.00 at the unshared or small ones; where the row kernel runs beside
#    the late dWo GEMM on part of the SMs (#0 59.7 us, #10 125.5 us) up to -20 us at #0 if its per-SM rate was latency-
#    bound; no change if it was L2-bound (dWo pulls ~4 TB/s of operands from L2 there).
# 3. A/B varlen on the eight workloads of S <= 919, two rounds: base, BIASROPE=vec1, and vec1 with the block table on
#    the side stream (ATTNBWD_CUDA_VARLEN_TABLE=side). Prediction: vec1 -5..-8 us at #8, #11, #1 (the mixed QKV path,
#    the pass beside the dAO GEMM), ~1.00 elsewhere; side a further -3..-4 us wherever the table sat between the QKV
#    projection and bias + RoPE (all eight).
# 4. Timelines of gqa #0 and #10 at ROWS 1 and 4, varlen #8 at vec and vec1.
source perf/device/common.sh
LIMIT=${LIMIT:-570}
P=$M/attnbwd_perf
F='CudaGqaRope.*:CudaVisionVarlenRope.BiasRope*:CudaVisionVarlenRope.Lt16*:CudaVisionVarlenRope.BlockTable*'
shards "$F" 235
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,8,10,12,13,15 --rounds 2 \
  --variant r1=$P,ATTNBWD_CUDA_GQA_ROWS=1 --variant r2=$P,ATTNBWD_CUDA_GQA_ROWS=2 \
  --variant r4=$P,ATTNBWD_CUDA_GQA_ROWS=4 --variant r8=$P,ATTNBWD_CUDA_GQA_ROWS=8 \
  --out $R/ab-rows.json > $R/ab-rows.txt 2>&1
echo "ab rows rc=$? t=$SECONDS"; tail -14 $R/ab-rows.txt
ok && timeout $(tmo 120) python3 perf/scripts/ab.py --op vision_varlen_rope_backward --workloads 0,1,3,5,7,8,11,12 \
  --rounds 2 --variant base=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec,ATTNBWD_CUDA_VARLEN_TABLE=main \
  --variant vec1=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec1,ATTNBWD_CUDA_VARLEN_TABLE=main \
  --variant vec1side=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec1,ATTNBWD_CUDA_VARLEN_TABLE=side \
  --out $R/ab-biasrope.json > $R/ab-biasrope.txt 2>&1
echo "ab biasrope rc=$? t=$SECONDS"; tail -22 $R/ab-biasrope.txt
mkdir -p $R/tl
for w in 0 10; do for v in 1 4; do
  ok && ATTNBWD_CUDA_GQA_ROWS=$v ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$w-r$v.txt timeout $(tmo 60) $P --backend=cuda \
    --ops=gqa_rope_backward --workloads=$w > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$w-r$v.txt > $R/tl/gqa-$w-r$v-print.txt 2>&1
  grep -E "rows16|span" $R/tl/gqa-$w-r$v-print.txt | head -3
done; done
for v in vec vec1; do
  ok && ATTNBWD_CUDA_VARLEN_TABLE=side ATTNBWD_CUDA_VARLEN_BIASROPE=$v ATTNBWD_PERF_TIMELINE=$R/tl/vl-8-$v.txt timeout $(tmo 60) $P --backend=cuda \
    --ops=vision_varlen_rope_backward --workloads=8 > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/vl-8-$v.txt > $R/tl/vl-8-$v-print.txt 2>&1
  grep -E "bias_rope|table|span" $R/tl/vl-8-$v-print.txt | head -4
done
echo "tl t=$SECONDS"
fin
