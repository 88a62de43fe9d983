# Next session, call 1 (written in the forty-eighth session, which got only H100s; perf/NOTES.md, its section). Before it:
#   bash cmake/dev.sh build-cuda && bash perf/device/bundle.sh
#   run(command="LIMIT=420 bash perf/device/next-c1.sh", carry=[".carry"])
# 1. Every CUDA test (97/97 passed on an H100 in the forty-eighth session on c3f8a99's binaries; rerun when the
#    library changed since, or on an H200, whose last full run was the forty-sixth session's 96/96).
# 2. The four suites twice: on an H200 these are issues 5-8's figures (gqa with DKDV auto = batch has never run on one:
#    ~0.547 expected from the H100's +0.2 %); on an H100 they only track the code (E ~7-12 % lower: H200 model).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 240
suites 2
fin
