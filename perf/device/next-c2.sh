# Next session, call 2: perf/device/s60-c2.sh (DWQKV=batch, a longer A/B; its header says why).
exec bash perf/device/s60-c2.sh "$@"
