# Forty-ninth session, call 6: what in the small-K grad_o_weight kernel slows the small attention path's first kernel
# ~2.4x even on 16 SMs (calls 2 and 4). attnbwd_perf_probe2 (perf/probes/smallk_corun_stamps.patch): the kernel with
# ATTNBWD_PROBE_SMALLK_MODE = 0 (as the library), 1 (no stores: products only, after the loads), 2 (no products:
# loads and stores of the staging). Timelines of #11 with smallk at 64 and 16 CTAs in each mode.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf_probe2
for mode in 0 1 2; do
  for n in 64 16; do
    timeline gqa_rope_backward 11 gqa-11-smallk-m$mode-$n ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=$n \
      ATTNBWD_PROBE_SMALLK_MODE=$mode | grep -E "wgrad|dp_softmax|small_dkdv|span"
  done
done
P=$M/attnbwd_perf
timeline gqa_rope_backward 11 gqa-11-auto | grep -E "nvjet|dp_softmax|small_dkdv|span"
fin
