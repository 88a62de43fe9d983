# Fortieth session, call 8 (bundle a594b9d, the session's last code): every CUDA test in three concurrent shards (the
# grouped kernel's new wait runs in every linear_backward launch: out_proj, mha and varlen included).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
shards 'Cuda*' 390
grep -hE '^\[  FAILED  \]' "$R"/tests-*.txt | head -20
fin
