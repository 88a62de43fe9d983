# Next session, call 1 (written in the forty-sixth session; perf/NOTES.md, its section). Before it:
#   bash cmake/dev.sh build-cuda && bash perf/device/bundle.sh
#   run(command="LIMIT=540 bash perf/device/next-c1.sh", carry=[".carry"])
# 1. ATTNBWD_CUDA_GQA_DKDV=batch (built in the forty-sixth session, never run): its test (oracle at S = 293, 131, 300,
#    the stage split, refusals) and the malformed-switch test, then memcheck on it. The scratch layout it needs
#    (Qp | dO, dS | Pp adjacent) is every call's since then: the small-shape and real-workload tests cover the padded
#    default path (S % 8 != 0) in every mode.
# 2. A/B batch against auto (apart) at #7, #0, #1 (the padded workloads; three rounds; at #0 #1 auto sums dK32 and
#    dV32 over the group, and batch then runs 2·B·Hkv GEMMs of K = G·Sp). Prediction: 2-5 µs less per call
#    (#7 1.01-1.03x, #0 #1 ~1.01x); a timeline of #7 with batch.
# 3. The sanitizer verdicts the forty-sixth session's autos still lack: racecheck on the block-table test (cut at 100 s
#    then), synccheck on DaAuto + BlockTable (racecheck's DaAuto verdict: its reports all in cuBLASLt's nvjet kernels).
# 4. The four suites once each (issues 5-8's figures; next-c2.sh takes two each).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DkDv*:CudaGqaRope.Malformed*:CudaGqaRope.PvOnTheSide*:CudaGqaRope.DpSoftmaxAuto*:CudaGqaRope.RealWorkloads*:CudaGqaRope.SmallShapes*' 200
sanitize memcheck 'CudaGqaRope.DkDv*' dkdv 90
abrun gqa_rope_backward 0,1,7 3 gqa-dkdv 80 auto=$P batch=$P,ATTNBWD_CUDA_GQA_DKDV=batch
timeline gqa_rope_backward 7 gqa-7-dkdv ATTNBWD_CUDA_GQA_DKDV=batch
sanitize racecheck 'CudaVisionVarlenRope.BlockTable*' table-race 200
sanitize synccheck 'CudaGqaRope.DaAuto*:CudaGqaRope.DkDv*:CudaVisionVarlenRope.BlockTable*' sync 100
for op in out_proj_backward gqa_rope_backward vision_mha_norm_backward vision_varlen_rope_backward; do
  ok && PB suite-$op-1 $P $op all
done
suite_e $R/suite-*.json
fin
