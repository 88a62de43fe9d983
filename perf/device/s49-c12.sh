# Forty-ninth session, last call: every CUDA test on the session's library (701c318: the small-K dWo kernel by name,
# auto unchanged), in three shards; then, on an H200 only and within the limit, the four suites once.
source perf/device/common.sh
LIMIT=${LIMIT:-380}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 250
case $GPU in *H200*) suites 1 ;; esac
fin
