# Next call (written in the fifty-first session): perf/device/s51-c3.sh with the bundle of its commit
# (bash perf/device/bundle.sh): every CUDA test on the library without split and sidedirect, then the suites on an
# H200.
exec bash perf/device/s51-c3.sh
