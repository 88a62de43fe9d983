# Next call: perf/device/s53-c2.sh (below, a copy).
# Fifty-third session, call 2: ATTNBWD_CUDA_MHA_TAIL=narrow (mha's warp-specialised attention kernels take the
# streamed sequence's last block, one row at S = 577, as a 16-wide block) — its tests and the neighbours first, then
# the A/B against full (auto) at five mha workloads (#13 B = 56, #8 B = 23, #11 B = 12, #4 B = 2, #10 B = 1), #8's
# timelines both ways, float64 PyTorch at #8 with narrow, and on an H200 the four suites. Binaries: .carry.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
L=$M/attnbwd_perf
P=$L
shards 'CudaVisionMhaNorm.NarrowTail*:CudaVisionMhaNorm.WarpSpecialised*:CudaVisionMhaNorm.FusedLaunch*' 200
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
abrun vision_mha_norm_backward 13,8,11,4,10 3 tail 200 full="$L" narrow="$L,ATTNBWD_CUDA_MHA_TAIL=narrow"
timeline vision_mha_norm_backward 8 mha-8-narrow ATTNBWD_CUDA_MHA_TAIL=narrow
timeline vision_mha_norm_backward 8 mha-8-full
torch_check vision_mha_norm_backward 8 ATTNBWD_CUDA_MHA_TAIL=narrow
case $GPU in *H200*) suites 1 ;; esac
fin
