# Next call: perf/device/s55-c1.sh (its header says what it runs and why); rebundle first: bash perf/device/bundle.sh,
# with --extra perf-prev=PATH (a perf binary of e6a3883, e.g. built in a git worktree) for its step (3).
exec bash perf/device/s55-c1.sh "$@"
