# Next session, call 1 (written in the fiftieth session; perf/NOTES.md, its "Left for the next session"): the fiftieth
# session's s50-c4.sh, which never started (nine refused starts): ATTNBWD_CUDA_GRAPHS=split against auto at gqa's
# small and middle workloads, the graph tests (split never ran on a GPU), #11's timeline under split, the probe's
# clean-L2 and outside-spinner cuts, varlen and mha A/B, split + smallk. Before it, on this machine:
#   git apply perf/probes/graph_effect_probe7.patch
#   (cd build/cuda && ninja attnbwd_perf) && cp build/cuda/perf/attnbwd_perf /tmp/attnbwd_perf_probe7
#   git checkout backends
#   (cd build/cuda && ninja attnbwd_perf attnbwd_tests attnbwd) && bash perf/device/bundle.sh \
#     --extra attnbwd_perf_probe7=/tmp/attnbwd_perf_probe7
#   run(command="LIMIT=300 bash perf/device/next-c1.sh", carry=[".carry"])
exec bash perf/device/s50-c4.sh
