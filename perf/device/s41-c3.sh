# Forty-first session, call 3 (bundle 5528705, the session's code): every CUDA test in three concurrent shards (the
# PDL attribute helper is in the launches of out_proj, gqa, mha and varlen).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
shards 'Cuda*' 390
grep -hE '^\[  FAILED  \]' "$R"/tests-*.txt | head -20
fin
