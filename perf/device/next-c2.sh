# Next session, call 2: the dP + softmax kernel's forms against the pair (auto = off today) on the nine GEMM-path
# workloads, two interleaved rounds; timelines of #0 and #10 with each form.
source perf/device/common.sh
LIMIT=540
P=$M/attnbwd_perf
timeout $(tmo 420) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,7,8,10,12,13,15 --rounds 2 \
  --variant off=$P --variant on=$P,ATTNBWD_CUDA_GQA_DPSM=on --variant wide=$P,ATTNBWD_CUDA_GQA_DPSM=wide \
  --out $R/ab-dpsm.json > $R/ab-dpsm.txt 2>&1
echo "ab rc=$? t=$SECONDS"; tail -16 $R/ab-dpsm.txt
mkdir -p $R/tl
for w in 0 10; do for v in off on wide; do
  ok && ATTNBWD_CUDA_GQA_DPSM=$v ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$w-$v.txt timeout $(tmo 60) $P --backend=cuda --ops=gqa_rope_backward --workloads=$w > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$w-$v.txt > $R/tl/gqa-$w-$v-print.txt 2>&1; grep -E "dp_softmax|span" $R/tl/gqa-$w-$v-print.txt | head -3
done; done
echo "tl t=$SECONDS"
# if time remains: the late dWo's SM target beside the kernel (tuned with the pair: 66 below 2048 tokens)
ok && timeout $(tmo 120) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,12 --rounds 1 \
  --variant on=$P,ATTNBWD_CUDA_GQA_DPSM=on --variant on84=$P,ATTNBWD_CUDA_GQA_DPSM=on,ATTNBWD_CUDA_GQA_DWO_SMS=84 \
  --variant on100=$P,ATTNBWD_CUDA_GQA_DPSM=on,ATTNBWD_CUDA_GQA_DWO_SMS=100 --out $R/ab-dpsm-dwo.json > $R/ab-dpsm-dwo.txt 2>&1
echo "dwo rc=$? t=$SECONDS"; tail -6 $R/ab-dpsm-dwo.txt
fin
