# Fifty-first session, call 3: split and sidedirect removed (no gain; perf/probes/graph_split_sidedirect.patch) and a
# failed capture's cause recorded (the replay tests assert none): every CUDA test in three shards, then on an H200
# only, within the limit, the four suites once (the issue figures). Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 250
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
case $GPU in *H200*) suites 1 ;; esac
fin
