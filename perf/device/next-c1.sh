# Next call (fifty-first session): perf/device/s51-c1.sh with the bundle of its commit (bash perf/device/bundle.sh).
exec bash perf/device/s51-c1.sh
