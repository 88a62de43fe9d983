# Forty-second session, call 1 (bundle of ATTNBWD_CUDA_THIN_ORDER): the thin q/k/v launch in stream-K order (the
# 40 slices × 96 k-blocks of gqa's q/k/v dealt out over 132 CTAs, 29-30 k-blocks each, against 120 CTAs of 32 by
# ranges). Count (perf/NOTES.md, end of the forty-first session): -3 to -6 % of the launch, -2 to -4 us at #13 and #2,
# -1.5 to -3 us at #5 and #11: 1.01-1.03x per call. 1. Tests: the two stream-K tests, the thin tests, the switch and
# PDL tests. 2. streamk against ranges at #2 #5 #11 #13, three interleaved rounds. 3. Timeline #13 streamk; float64
# PyTorch #13 and #5 with streamk. 4. memcheck on out_proj's stream-K test.
# (Written again after the call with common.sh's helpers abrun, timeline, torch_check and sanitize: the same
# steps; the timelines now print their first 16 lines.)
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinQkv*:CudaOutProj.Thin*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*' 150
abrun gqa_rope_backward 2,5,11,13 3 thin-order 150 ranges=$P,ATTNBWD_CUDA_THIN_ORDER=ranges \
  streamk=$P,ATTNBWD_CUDA_THIN_ORDER=streamk
for v in streamk ranges; do timeline gqa_rope_backward 13 gqa-13-$v ATTNBWD_CUDA_THIN_ORDER=$v; done
for w in 13 5; do torch_check 003 $w ATTNBWD_CUDA_THIN_ORDER=streamk; done
sanitize memcheck 'CudaOutProj.ThinPathInStreamK*' streamk 120
fin
