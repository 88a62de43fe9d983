# Fiftieth session, call 1: perf/device/next-c1.sh's cuts at the graph effect (the captured graph's dump; stamps of the
# small path's first attention kernel with dA by cuBLASLt and by a memset, beside 16 spinning CTAs and alone), then
# every CUDA test in three shards (the library of 05d624a: the refactors after 701c318 never ran on a GPU), then on an
# H200 only the four suites once.
source perf/device/common.sh
LIMIT=${LIMIT:-560}
P=$M/attnbwd_perf
Q=$M/attnbwd_perf_probe4
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16 ATTNBWD_PROBE_SMALLK_MODE=3"
stamps "$Q" spin16-dump $S ATTNBWD_PROBE_GRAPH_DUMP=1
grep -E "^(NODE|EDGE)" "$R/stderr-spin16-dump.txt" | head -60
stamps "$Q" spin16-da-memset $S ATTNBWD_PROBE_DA=1
stamps "$Q" auto-da-memset ATTNBWD_PROBE_DA=1
stamps "$Q" spin16 $S
stamps "$Q" auto
python3 perf/scripts/stamps.py "$R"/stamps-*.txt
shards 'Cuda*:*Cuda*' 250
case $GPU in *H200*) suites 1 ;; esac
fin
