# Next session, call 2: depends on call 1. With ROWS=${ROWS:-4} (the winner of call 1; set ROWS=1 if none won): the
# late dWo's SM target beside the row kernel (auto's 66 below 2048 tokens, 84 from there was tuned with ROWS = 1), on
# the GEMM-path workloads, one round; then the four suites (the state of the code after call 1's choices are made
# auto: rebundle first).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
RW=${ROWS:-4}
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,8,10,12,13,15 --rounds 1 \
  --variant auto=$P,ATTNBWD_CUDA_GQA_ROWS=$RW --variant s84=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=84 \
  --variant s100=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=100 \
  --variant s116=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=116 --out $R/ab-rows-dwo.json > $R/ab-rows-dwo.txt 2>&1
echo "ab dwo rc=$? t=$SECONDS"; tail -14 $R/ab-rows-dwo.txt
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op $P $op all
done
fin
