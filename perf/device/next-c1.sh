# Next session, call 1 (rewritten in the forty-fourth session, which had no GPU; perf/NOTES.md, its section). Build
# first (a fresh checkout has no build: `bash cmake/dev.sh build-cuda`, ~10-15 min on 2 cores), then
# `bash perf/device/bundle.sh`, then run(command="LIMIT=480 bash perf/device/next-c1.sh", carry=[".carry"]).
# 1. The tests no GPU has run: the three rewritten on check_each_value (forty-third session), the new
#    DaHeadsPointerArrayMatchesTheOracle (ATTNBWD_CUDA_GQA_DA=heads), DvAfterGradOWeightAndDvSmsMatchTheOracle
#    (ATTNBWD_CUDA_GQA_DV, _DV_SMS) and the malformed-switch test (DA, DV, DV_SMS now read up front).
# 2. heads against auto at the seven workloads where the op copies dA into the head-split dO (#2 #3 #8 #9 #10 #14 #15),
#    three rounds, and heads as one batch (DA_ROWS=off). Count: the copy is 10-22 µs at the six large-B workloads (H100
#    timelines), ~+0.5 % of gqa's geomean if the batch keeps the strided GEMM's rate.
# 3. DV=after / afterdp (alone and with DV_SMS=48) and DV_SMS=48 against auto on the unpadded GEMM attention path with
#    late dWo (#3 #8 #10 #12 #13 #15), two rounds. Count: dP starts behind dV32's all-SM grid and shares the SMs with it (#10: dV 184-228, dP
#    199-265; #15: dV 123-162, dP 144-191; dP alone ~20 µs): -25 to -45 µs at #10 #15 if dP runs alone or beside dWo;
#    after loses where dWo ends well after the chain (#3: 119 µs after), as the merge then waits for it.
#    afterdp on the padded GEMM path (#0 #1, three rounds): dWo launched first takes 64 SMs and dP runs 28 µs beside it
#    at #0 (17 alone): -8 to -11 µs at #0 (~3 %) if dWo, started after dP, still ends before the chain.
# 4. Timelines #10 with heads, after and afterdp; #15 with after; #0 with afterdp.
# 5. perf/probes/cublaslt_da_pointer_array.cu; on an H200, gqa suites (issue 6's figure). next-c2.sh has the rest.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DwoSm*:CudaGqaRope.DwoFirst*:CudaGqaRope.DaRow*:CudaGqaRope.DaHeads*:CudaGqaRope.DvAfter*:CudaGqaRope.Malformed*:CudaGqaRope.KvWeight*:CudaGqaRope.DxSum*' 120
abrun gqa_rope_backward 2,3,8,9,10,14,15 3 da-heads 120 auto=$P heads=$P,ATTNBWD_CUDA_GQA_DA=heads \
  heads1=$P,ATTNBWD_CUDA_GQA_DA=heads,ATTNBWD_CUDA_GQA_DA_ROWS=off
abrun gqa_rope_backward 3,8,10,12,13,15 2 dv 130 auto=$P after=$P,ATTNBWD_CUDA_GQA_DV=after afterdp=$P,ATTNBWD_CUDA_GQA_DV=afterdp \
  afterdp48=$P,ATTNBWD_CUDA_GQA_DV=afterdp,ATTNBWD_CUDA_GQA_DV_SMS=48 sms48=$P,ATTNBWD_CUDA_GQA_DV_SMS=48
abrun gqa_rope_backward 0,1 3 dv-pad 50 auto=$P afterdp=$P,ATTNBWD_CUDA_GQA_DV=afterdp
timeline gqa_rope_backward 10 gqa-10-heads ATTNBWD_CUDA_GQA_DA=heads
timeline gqa_rope_backward 10 gqa-10-after ATTNBWD_CUDA_GQA_DV=after
timeline gqa_rope_backward 10 gqa-10-afterdp ATTNBWD_CUDA_GQA_DV=afterdp
timeline gqa_rope_backward 15 gqa-15-after ATTNBWD_CUDA_GQA_DV=after
timeline gqa_rope_backward 0 gqa-0-afterdp ATTNBWD_CUDA_GQA_DV=afterdp
ok && nvcc -std=c++20 -O2 -arch=sm_90a -o /tmp/probe_pa perf/probes/cublaslt_da_pointer_array.cu -lcublasLt \
  && timeout "$(tmo 60)" /tmp/probe_pa > "$R/probe-da-pointer-array.txt" 2>&1
echo "probe rc=$? t=$SECONDS"; cat "$R/probe-da-pointer-array.txt"
case $GPU in *H200*)
  ok && PB suite-gqa-1 $P gqa_rope_backward all
  ok && PB suite-gqa-2 $P gqa_rope_backward all
  suite_e $R/suite-gqa-1.json $R/suite-gqa-2.json ;;
esac
fin
