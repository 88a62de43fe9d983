# Written in the fifty-eighth session for the next session's first call (rebundle first: bash perf/device/bundle.sh).
# 240e83d and 923f57c (gqa's dQ pass as one warp-specialised form, KVDQ auto = on, decided at planning with a fallback)
# compiled and passed CI but never ran on a GPU:
# (1) every CUDA test in three shards; (2) on an H200 the four suites twice (gqa's first issue figure with the dQ pass;
#     the H100s gave 0.511-0.514 against 0.502 before it), elsewhere the gqa suite once.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
all_tests
suites_or gqa_rope_backward
fin
