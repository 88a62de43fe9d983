# Forty-first session, call 1 (bundle ff52690: accumulating cuBLASLt GEMMs timed on a scratch; the PDL attribute helper).
# Tests: the new AccumulatingGemmIsTimedOnAScratchAndAddsOnce and every determinism test (LT tuning rules), gqa's acc,
# tuned-GEMM, switch and PDL-launch tests; memcheck on the new test. Then ATTNBWD_CUDA_LT_TUNE=beta0 (the old rule: the
# beta = 1 dXk/dXv GEMMs untimed) against auto on the separate-path workloads #0, #1, #4, #12, three interleaved rounds.
# Prediction: 1.003-1.01x (the fortieth session's #0 timeline: each acc GEMM 1.5-1.9 us slower than its timed
# overwrite form). The choices printed at #0 (verbose), float64 PyTorch #0 and #12, timelines of #12 and #13 (PDL off:
# the merge's length without the thin launch's prologue beside it), and the gqa suite.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaDeterminism.*:CudaGqaRope.DxSumAcc*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.TunedGemms*:CudaGqaRope.QkvLaunches*' 150
sanitize memcheck 'CudaDeterminism.Accumulating*' acc 60
abrun gqa_rope_backward 0,1,4,12 3 acc-tune 80 beta0=$P,ATTNBWD_CUDA_LT_TUNE=beta0 auto=$P
ok && env ATTNBWD_CUDA_LT_TUNE=verbose timeout $(tmo 30) $P --backend=cuda --ops=gqa_rope_backward --workloads=0 \
  > $R/verbose-0.txt 2>&1; grep "lt_tune" $R/verbose-0.txt | head -20
for w in 0 12; do torch_check 003 $w; done
for v in 12:auto 13:auto 13:off; do
  w=${v%%:*}; pdl=${v##*:}
  timeline gqa_rope_backward $w gqa-$w-$pdl ATTNBWD_CUDA_GQA_PDL=$pdl
done
case $GPU in *H200*) ok && PB suite-gqa_rope_backward $P gqa_rope_backward all ;; *) echo "no suite: not an H200" ;; esac
suite_e $R/suite-gqa_rope_backward.json
fin
