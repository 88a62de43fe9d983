# Next call: perf/device/s58-c16.sh (its header says what it runs and why).
exec bash perf/device/s58-c16.sh "$@"
