# Forty-ninth session, call 11: is call 9's graph-only slowdown of the first small attention kernel beside a side-
# stream kernel tied to the graph's programmatic (PDL) edges? Stamps (probe3: the library with
# perf/probes/smallk_corun_stamps.patch) with graphs on, 16 spinning CTAs beside it, with every PDL edge of the call
# off (ATTNBWD_CUDA_GQA_PDL=off, ATTNBWD_CUDA_GQA_SMALL_PDL=off), and as call 9.
source perf/device/common.sh
LIMIT=${LIMIT:-120}
Q=$M/attnbwd_perf_probe3
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16 ATTNBWD_PROBE_SMALLK_MODE=3"
env $S ATTNBWD_CUDA_GQA_PDL=off ATTNBWD_CUDA_GQA_SMALL_PDL=off timeout "$(tmo 50)" "$Q" --backend=cuda \
  --ops=gqa_rope_backward --workloads=11 > "$R/stamps-spin16-nopdl.txt" 2>&1
echo "nopdl rc=$?"
env $S timeout "$(tmo 50)" "$Q" --backend=cuda --ops=gqa_rope_backward --workloads=11 > "$R/stamps-spin16.txt" 2>&1
echo "pdl rc=$?"
env ATTNBWD_CUDA_GQA_PDL=off ATTNBWD_CUDA_GQA_SMALL_PDL=off timeout "$(tmo 50)" "$Q" --backend=cuda \
  --ops=gqa_rope_backward --workloads=11 > "$R/stamps-auto-nopdl.txt" 2>&1
echo "auto nopdl rc=$?"
fin
