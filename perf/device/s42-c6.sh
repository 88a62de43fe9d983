# Forty-second session, call 6 (bundle of ATTNBWD_CUDA_THIN_SPLITN): call 4's ncu found the dW warpgroup the critical
# one at MB = 4 (20 of the 32 products per k-block and the dW epilogue; the dX warpgroup 66 % of its samples waiting
# on full slots). on: each consumer warpgroup holds 64 of the slice's 128 columns of dW and of every dX row block
# (m64n64 products: 16 per k-block each at MB = 4; shared-memory operand reads +33 %: 0.0625 B/MAC, 128 B/clk at the
# tensor peak). Prediction: the MB = 4 kernel −10-20 % (#13 and #2: −6 to −12 µs, 1.05-1.09x per call); MB ≤ 3
# (balanced already) 0.97-1.01x. 1. Tests. 2. off / on at #2 #5 #11 #13, two rounds. 3. Timeline #13 on; float64
# PyTorch #13 with on.
# (Written again after the call with common.sh's helpers abrun, timeline, torch_check and sanitize: the same
# steps; the timelines now print their first 16 lines.)
source perf/device/common.sh
LIMIT=${LIMIT:-280}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinSplit*:CudaOutProj.ThinPathSplit*:CudaGqaRope.MalformedSwitches*' 90
abrun gqa_rope_backward 2,5,11,13 2 thin-splitn 100 off=$P,ATTNBWD_CUDA_THIN_SPLITN=off on=$P,ATTNBWD_CUDA_THIN_SPLITN=on
timeline gqa_rope_backward 13 gqa-13-on ATTNBWD_CUDA_THIN_SPLITN=on
torch_check 003 13 ATTNBWD_CUDA_THIN_SPLITN=on
fin
