# Fifty-seventh session, short form of s57-c1.sh for what device time is left after ten refused starts: only what
# the flipped mha defaults (PTRIM auto = cols, 7051091; DELTA auto = tma, df24106) need on a GPU — mha's CUDA tests
# (the other ops' code did not change since their last full test run), the #4 soak, racecheck of the default at #10.
source perf/device/common.sh
LIMIT=${LIMIT:-240}
P=$M/attnbwd_perf
shards 'Cuda*VisionMha*:Cuda*.VisionMha*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
soak vision_mha_norm_backward 4 10
race_cli vision_mha_norm_backward 10 40
ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all && suite_e "$R"/suite-*.json
fin
