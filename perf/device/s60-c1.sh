# Written in the fifty-ninth session for the next session's first call (rebundle first: bash perf/device/bundle.sh).
# No H200 came in the fifty-ninth session (twelve calls: five H100s, seven refused), so gqa's issue figure with the dQ
# pass and auto's key-major rule from S = 256 is still to measure. (1) Every CUDA test in three shards (main since
# feff285: DWQKV=batch's code, auto = apart, ran only its own test on a GPU); (2) on an H200 the four suites twice,
# elsewhere the gqa suite once.
exec bash perf/device/s59-c1.sh "$@"  # the same steps (every CUDA test, then suites_or gqa)
