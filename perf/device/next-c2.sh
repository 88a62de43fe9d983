# Next session, call 2: nothing queued. s57-c2.sh (issue 7's sanitizer matrix over mha's 16 workloads) ran in the
# fifty-seventh session's call 16: 34 of 34 jobs clean
# (perf/results/sanitizer/h100-2026-12-07-s57-c16-dc36286-sanitize-workloads-mha.txt). Rerun it after a change to
# mha's kernels: bash perf/device/s57-c2.sh
echo "next-c2.sh: nothing queued (see its header)" >&2
exit 1
