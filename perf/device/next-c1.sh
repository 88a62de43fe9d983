# Next session, call 1 (written in the forty-seventh session; perf/NOTES.md, its section). Before it:
#   bash cmake/dev.sh build-cuda && bash perf/device/bundle.sh
#   run(command="LIMIT=540 bash perf/device/next-c1.sh", carry=[".carry"])
# 1. Every CUDA test on today's defaults (DKDV auto = batch since 5741b85: 28/28 gqa tests passed on an H100 then; the
#    other ops unchanged since the forty-sixth session's 96/96 on an H200), which includes SMALL_PDL=late's test
#    (SmallAttnSecondLaunchFormsGiveTheSameBits; late built in the forty-seventh session, never run).
# 2. SMALL_PDL=late, and late with DWO_SMS=66, against auto at the small-path workloads #2 #5 #11 (three rounds;
#    prediction 1.02-1.05x), a timeline of #11 with late.
# 3. racecheck on the varlen block-table test with cuBLASLt's kernels excluded (twice cut at its cap with all 100
#    reports inside nvjet kernels: no verdict on ours yet).
# 4. The four suites twice (issues 5-8's figures; on an H200 the first with DKDV auto = batch: gqa ~0.547 expected).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 240
abrun gqa_rope_backward 2,5,11 3 gqa-small-pdl-late 50 auto=$P late=$P,ATTNBWD_CUDA_GQA_SMALL_PDL=late late66=$P,ATTNBWD_CUDA_GQA_SMALL_PDL=late,ATTNBWD_CUDA_GQA_DWO_SMS=66
ok && timeline gqa_rope_backward 11 gqa-11-small-pdl-late ATTNBWD_CUDA_GQA_SMALL_PDL=late
SAN_ARGS="--kernel-name-exclude kns=nvjet" sanitize racecheck 'CudaVisionVarlenRope.BlockTable*' table-race 120
suites 2
fin
