# Forty-second session, call 3 (bundle of ATTNBWD_CUDA_THIN_SUM=meetwide): call 2 measured meet 0.954-0.965x and
# meetcoop 0.934-0.941x of launch at #2 #5 #11 #13 (H100); the #13 timeline: meet's kernel 83.9 us against launch's
# 71.5 + a 6 us tail, so its in-kernel sum took ~12 us: reduce_units keeps two units' loads in flight per thread (about
# six L2 round trips per warpgroup). meetwide issues every load of a range at once (three round trips at ranges = 3).
# Count: L2 traffic 15.7 MB at ~5 TB/s ≈ 3 us, plus the wait for the slice's last CTA: ~3-4 us against launch's 6.
# Prediction: meetwide 1.00-1.02x of launch. 1. Tests. 2. launch / meetwide / meet at #2 #5 #11 #13, three rounds.
# 3. Timeline #13 meetwide; float64 PyTorch #13 with meetwide.
# (Written again after the call with common.sh's helpers abrun, timeline, torch_check and sanitize: the same
# steps; the timelines now print their first 16 lines.)
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinSum*:CudaOutProj.ThinPathSumming*:CudaGqaRope.MalformedSwitches*' 120
abrun gqa_rope_backward 2,5,11,13 3 thin-sum-wide 130 launch=$P,ATTNBWD_CUDA_THIN_SUM=launch \
  meetwide=$P,ATTNBWD_CUDA_THIN_SUM=meetwide meet=$P,ATTNBWD_CUDA_THIN_SUM=meet
timeline gqa_rope_backward 13 gqa-13-meetwide ATTNBWD_CUDA_THIN_SUM=meetwide
torch_check 003 13 ATTNBWD_CUDA_THIN_SUM=meetwide
fin
