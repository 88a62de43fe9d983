# Next call: perf/device/s60-c4.sh (its header says what it runs and why); rebundle first:
#   bash perf/device/bundle.sh
exec bash perf/device/s60-c4.sh "$@"
