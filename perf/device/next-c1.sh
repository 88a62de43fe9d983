# Next session, call 1 (written in the forty-ninth session; perf/NOTES.md, its "Left for the next session"): the cuts at
# the graph effect (the small path's first attention kernel stalls ~12 µs per CTA beside any side-branch kernel, inside
# the CUDA graph only). Before it, on this machine:
#   git apply perf/probes/smallk_corun_stamps.patch perf/probes/graph_effect_cuts.patch
#   (cd build/cuda && ninja attnbwd_perf) && cp build/cuda/perf/attnbwd_perf /tmp/attnbwd_perf_probe4
#   git checkout backends
#   (cd build/cuda && ninja attnbwd_perf attnbwd_tests attnbwd) && bash perf/device/bundle.sh \
#     --extra attnbwd_perf_probe4=/tmp/attnbwd_perf_probe4
#   run(command="LIMIT=300 bash perf/device/next-c1.sh", carry=[".carry"])
# 1. The captured graph of gqa #11 (nodes: kernel, grid, cluster, priority, memory-sync domain, programmatic
#    serialization; edges: port, type), with 16 spinning CTAs of the small-K kernel on the side branch.
# 2. Stamps of the first attention kernel beside them, with dA by cuBLASLt and by a memset (ATTNBWD_PROBE_DA=1): is
#    the cuBLASLt node before the fork the ingredient? (Alone, call 11 of the forty-ninth: ~8.5 µs; beside: ~20 µs.)
# 3. On an H200 only: the four suites once (the issues' figures; none since the forty-sixth session).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
Q=$M/attnbwd_perf_probe4
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16 ATTNBWD_PROBE_SMALLK_MODE=3"
run_q() {  # name, then VAR=value...: one perf run of the probe at #11, stamps on stdout, the graph dump on stderr
  local name=$1
  shift
  ok && env "$@" timeout "$(tmo 60)" "$Q" --backend=cuda --ops=gqa_rope_backward --workloads=11 \
    > "$R/stamps-$name.txt" 2> "$R/stderr-$name.txt"
  echo "$name rc=$?"
}
run_q spin16-dump $S ATTNBWD_PROBE_GRAPH_DUMP=1
grep -E "^(NODE|EDGE)" "$R/stderr-spin16-dump.txt" | head -60
run_q spin16-da-memset $S ATTNBWD_PROBE_DA=1
run_q auto-da-memset ATTNBWD_PROBE_DA=1
run_q spin16 $S
run_q auto
python3 perf/scripts/stamps.py "$R"/stamps-*.txt
case $GPU in *H200*) suites 1 ;; esac
fin
