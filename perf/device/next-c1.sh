# Next session, call 1 (planned at the end of the forty-second session; perf/NOTES.md, its last section): the idle
# start of gqa's large-B workloads. The twenty-second and thirty-sixth sessions' timelines of #3 (B = 16, S = 256) and
# #10 (B = 8, S = 384) open with a 0.7-0.8 µs memset on the caller's stream and then 13-21 µs with nothing running
# before dA's cuBLASLt kernel (nvjet ..._coopA_NNT) starts; #4 and #6 (B = 1) start that same kernel at 0.0 with no
# memset. If the memset is cuBLASLt's workspace zeroing for that GEMM's configuration and the gap is tied to it, ~15-20
# µs of #3, #8, #9, #10, #14, #15 (T = 2048-4096, B > 1) are idle: ~1-3 % each, up to ~+0.9 % of the geomean.
# 1. Timelines (first lines) of #3, #8, #9, #10, #14, #15 as they are. 2. #10 and #3 with ATTNBWD_CUDA_LT_TUNE=off (the
# first heuristic answer) and with ATTNBWD_CUDA_GRAPHS=0. 3. auto / LT_TUNE=off / GRAPHS=0 at #3 #8 #9 #10 #14 #15, two
# rounds. (H200 or H100: compare within the call.)
source perf/device/common.sh
LIMIT=${LIMIT:-360}
P=$M/attnbwd_perf
for w in 3 8 9 10 14 15; do timeline gqa_rope_backward $w gqa-$w-auto | head -4; done
for w in 10 3; do
  timeline gqa_rope_backward $w gqa-$w-tuneoff ATTNBWD_CUDA_LT_TUNE=off | head -4
  timeline gqa_rope_backward $w gqa-$w-graphs0 ATTNBWD_CUDA_GRAPHS=0 | head -4
done
# The algorithms the tuning keeps at #10 (each choice printed to stderr), to name the GEMM the memset belongs to.
ok && env ATTNBWD_CUDA_LT_TUNE=verbose timeout $(tmo 40) $P --backend=cuda --ops=gqa_rope_backward --workloads=10 \
  > $R/tune-10.log 2> $R/tune-10.txt
echo "tune 10 rc=$? t=$SECONDS"; head -20 $R/tune-10.txt
abrun gqa_rope_backward 3,8,9,10,14,15 2 large-start 200 auto=$P tuneoff=$P,ATTNBWD_CUDA_LT_TUNE=off \
  graphs0=$P,ATTNBWD_CUDA_GRAPHS=0
fin
