# Next call: perf/device/s61-c8.sh (its header says what it runs and why); rebundle first:
#   bash perf/device/bundle.sh
exec bash perf/device/s61-c8.sh "$@"
