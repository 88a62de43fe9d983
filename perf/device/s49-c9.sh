# Forty-ninth session, call 9: call 8's stamps with the first kernel's SM cycles too (clock64), with and without CUDA
# graphs (ATTNBWD_CUDA_GRAPHS=0), alone and beside 16 spinning CTAs of the small-K kernel (probe3: the library with
# perf/probes/smallk_corun_stamps.patch).
source perf/device/common.sh
LIMIT=${LIMIT:-200}
Q=$M/attnbwd_perf_probe3
for g in auto 0; do
  ATTNBWD_CUDA_GRAPHS=$g timeout "$(tmo 60)" "$Q" --backend=cuda --ops=gqa_rope_backward --workloads=11 \
    > "$R/stamps-auto-g$g.txt" 2>&1
  echo "auto graphs=$g rc=$?"
  ATTNBWD_CUDA_GRAPHS=$g ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16 ATTNBWD_PROBE_SMALLK_MODE=3 \
    timeout "$(tmo 60)" "$Q" --backend=cuda --ops=gqa_rope_backward --workloads=11 > "$R/stamps-spin16-g$g.txt" 2>&1
  echo "spin16 graphs=$g rc=$?"
done
fin
