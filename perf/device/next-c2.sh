# Next session, call 2: perf/device/s59-c2.sh (auto's key-major rule below S = 1024; its header says why).
exec bash perf/device/s59-c2.sh "$@"
