# Next call (written in the fifty-third session): perf/device/s53-c15.sh (below, a copy), with the bundle of HEAD.
# Fifty-third session, call 15 (bundle with ATTNBWD_CUDA_MHA_TAIL = narrow and ATTNBWD_CUDA_MHA_PTRIM = on by auto):
# every CudaVisionMhaNorm test and the mha graph replays with the new auto, then the mha suite (any GPU; on an H200 the
# four suites twice: the issue figures).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 90
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
case $GPU in
  *H200*) suites 2 ;;
  *) ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all; suite_e "$R"/suite-*.json ;;
esac
fin
