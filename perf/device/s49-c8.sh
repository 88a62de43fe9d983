# Forty-ninth session, call 8: per-CTA stamps (smid, %globaltimer start/end, device printf) of the small path's first
# attention kernel (dp_softmax) at gqa #11, alone (auto: cuBLASLt dWo queued after it) and beside 16 spinning CTAs of
# the small-K kernel (ATTNBWD_PROBE_SMALLK_MODE=3); attnbwd_perf_probe3 is the library with
# perf/probes/smallk_corun_stamps.patch.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
Q=$M/attnbwd_perf_probe3
timeout "$(tmo 60)" "$Q" --backend=cuda --ops=gqa_rope_backward --workloads=11 > "$R/stamps-auto.txt" 2>&1
echo "auto rc=$? $(grep -c '^DP' "$R/stamps-auto.txt") DP lines"
ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16 ATTNBWD_PROBE_SMALLK_MODE=3 timeout "$(tmo 60)" "$Q" \
  --backend=cuda --ops=gqa_rope_backward --workloads=11 > "$R/stamps-spin16.txt" 2>&1
echo "spin16 rc=$? $(grep -c '^DP' "$R/stamps-spin16.txt") DP lines, $(grep -c '^WG' "$R/stamps-spin16.txt") WG lines"
fin
