# Next session, call 2 (written in the fifty-sixth): issue 7's sanitizer matrix over mha's 16 workloads on the current
# kernels (perf/device/s57-c2.sh; resumable with DONE=<the committed sanitize-workloads.txt of an earlier call>).
exec bash perf/device/s57-c2.sh "$@"
