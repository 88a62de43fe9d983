# Next call (written in the fifty-second session): perf/device/s52-c4.sh with the bundle of its commit
# (bash perf/device/bundle.sh): on an H200 the four suites twice (the issue figures; main's code is a2740c2's, whose
# CUDA tests all passed on an H100 in the fifty-second session's call 1); on any other GPU nothing.
exec bash perf/device/s52-c4.sh
