# Next session, call 1 (rewritten in the forty-fourth session, which had no GPU; perf/NOTES.md, its section). 1. The
# tests no GPU has run: the three rewritten on check_each_value (forty-third session) and the new
# DaHeadsPointerArrayMatchesTheOracle (ATTNBWD_CUDA_GQA_DA=heads) with the malformed-switch test (DA now read up front).
# 2. heads against auto at the seven workloads where the op copies dA into the head-split dO (#2 #3 #8 #9 #10 #14 #15),
# three rounds, and heads with one batch (DA_ROWS=off) at #3 #9 #10, where auto cuts the strided dA in 2048-row pieces
# for cuBLASLt's memset + gap; the #10 and #3 timelines with heads. Count: the copy is 10-22 µs at the six large-B
# workloads (H100 timelines), ~+0.5 % of gqa's geomean if the batch keeps the strided GEMM's rate. 3.
# perf/probes/cublaslt_da_pointer_array.cu (the batch alone against strided dA + copy, every candidate). 4. On an H200:
# gqa suites of the bundle (issue 6's figure). 5. s43-c8's DWO_SMS A/B if time is left.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DwoSm*:CudaGqaRope.DwoFirst*:CudaGqaRope.DaRow*:CudaGqaRope.DaHeads*:CudaGqaRope.Malformed*' 90
abrun gqa_rope_backward 2,3,8,9,10,14,15 3 da-heads 150 auto=$P heads=$P,ATTNBWD_CUDA_GQA_DA=heads \
  heads1=$P,ATTNBWD_CUDA_GQA_DA=heads,ATTNBWD_CUDA_GQA_DA_ROWS=off
timeline gqa_rope_backward 10 gqa-10-heads ATTNBWD_CUDA_GQA_DA=heads
timeline gqa_rope_backward 3 gqa-3-heads ATTNBWD_CUDA_GQA_DA=heads
ok && nvcc -std=c++20 -O2 -arch=sm_90a -o /tmp/probe_pa perf/probes/cublaslt_da_pointer_array.cu -lcublasLt \
  && timeout "$(tmo 90)" /tmp/probe_pa > "$R/probe-da-pointer-array.txt" 2>&1
echo "probe rc=$? t=$SECONDS"; cat "$R/probe-da-pointer-array.txt"
case $GPU in *H200*)
  ok && PB suite-gqa-1 $P gqa_rope_backward all
  ok && PB suite-gqa-2 $P gqa_rope_backward all
  suite_e $R/suite-gqa-1.json $R/suite-gqa-2.json ;;
esac
abrun gqa_rope_backward 3,8,10,15 2 dwo-sms 100 auto=$P sms66=$P,ATTNBWD_CUDA_GQA_DWO_SMS=66 \
  sms100=$P,ATTNBWD_CUDA_GQA_DWO_SMS=100 off=$P,ATTNBWD_CUDA_GQA_DWO_SMS=off
fin
