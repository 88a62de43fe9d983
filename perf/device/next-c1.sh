# Next session, call 1 (written in the forty-seventh session; perf/NOTES.md, its section). Before it:
#   bash cmake/dev.sh build-cuda && bash perf/device/bundle.sh
#   run(command="LIMIT=540 bash perf/device/next-c1.sh", carry=[".carry"])
# 1. Every CUDA test on today's defaults (DKDV auto = batch since 5741b85: 28/28 gqa tests passed on an H100 then; the
#    other ops unchanged since the forty-sixth session's 96/96 on an H200).
# 2. racecheck on the varlen block-table test with cuBLASLt's kernels excluded (twice cut at its cap with all 100
#    reports inside nvjet kernels: no verdict on ours yet).
# 3. The four suites twice (issues 5-8's figures; on an H200 the first with DKDV auto = batch: gqa ~0.547 expected).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 240
SAN_ARGS="--kernel-name-exclude kns=nvjet" sanitize racecheck 'CudaVisionVarlenRope.BlockTable*' table-race 150
suites 2
fin
