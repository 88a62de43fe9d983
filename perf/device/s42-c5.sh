# Forty-second session, call 5 (bundle of ATTNBWD_CUDA_THIN_DWSTORE): call 4's ncu of the thin kernel at #13 (H200):
# tensor pipe 75 % of active cycles at ncu's 1.32 GHz; the dW warpgroup (the longer one: 16 dW + 4 dX products per
# k-block against 12) spends ~28 % of its stall samples in store_dw_block's two named barriers and proxy fence around
# the single staging buffer (the previous block's TMA store must have read it), and the dX warpgroup ~66 % waiting on
# full slots (it runs ahead, held by the rings that the dW warpgroup releases). direct: dW stored from the registers
# while the next products run (no staging, no barriers); direct4: and one more W stage in the freed 16 KB.
# Prediction: the dW warpgroup's loop −15-25 %, the kernel −5-12 µs at #13 and #2 (1.04-1.09x per call), less at #5
# and #11 (MB ≤ 3, more DRAM-bound): 1.02-1.05x. 1. Tests. 2. tma / direct / direct4 at #2 #5 #11 #13, three rounds.
# 3. Timelines #13; float64 PyTorch #13, #5 with direct; memcheck on out_proj's direct test.
# (Written again after the call with common.sh's helpers abrun, timeline, torch_check and sanitize: the same
# steps; the timelines now print their first 16 lines.)
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinDwStores*:CudaOutProj.Thin*:CudaGqaRope.ThinQkv*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*' 150
abrun gqa_rope_backward 2,5,11,13 3 thin-dwstore 170 tma=$P,ATTNBWD_CUDA_THIN_DWSTORE=tma \
  direct=$P,ATTNBWD_CUDA_THIN_DWSTORE=direct direct4=$P,ATTNBWD_CUDA_THIN_DWSTORE=direct4
for v in direct direct4; do timeline gqa_rope_backward 13 gqa-13-$v ATTNBWD_CUDA_THIN_DWSTORE=$v; done
for w in 13 5; do torch_check 003 $w ATTNBWD_CUDA_THIN_DWSTORE=direct; done
sanitize memcheck 'CudaOutProj.ThinPathWithDirect*' direct 120
fin
