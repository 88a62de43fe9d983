# Forty-ninth session, call 7: the same question as call 6 with two more probe modes of attnbwd_perf_probe2 (the
# library with perf/probes/smallk_corun_stamps.patch): ATTNBWD_PROBE_SMALLK_MODE = 3 (the CTAs resident, B loaded once,
# then a 36 K-cycle spin on clock64: no traffic, no products), 4 (products on the first ring fill only: tensor work
# with no reloads and no stores).
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf_probe2
for mode in 3 4; do
  for n in 64 16; do
    timeline gqa_rope_backward 11 gqa-11-smallk-m$mode-$n ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=$n \
      ATTNBWD_PROBE_SMALLK_MODE=$mode | grep -E "wgrad|dp_softmax|small_dkdv|span"
  done
done
fin
