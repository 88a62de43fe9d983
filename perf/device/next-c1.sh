# Next call: perf/device/s56-c1.sh (its header says what it runs and why); rebundle first:
#   bash perf/device/bundle.sh --extra perf-prev=/work/prev/perf-4d9b038
exec bash perf/device/s56-c1.sh "$@"
