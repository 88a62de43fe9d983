# Fifty-seventh session's first call (written in the fifty-sixth; rebundle first: bash perf/device/bundle.sh).
# (1) every CUDA test on the new defaults (PTRIM auto = cols, 7051091: mha's tests passed on it in call 17; DELTA auto
#     = tma, df24106: ran on a GPU only by name before the flip); then the #4 soak;
# (2) racecheck on mha's default path at #10 and #4 (plain GEMMs): call 17 had 0 hazards with DELTA=tma by name;
# (3) on an H200 the four suites twice (mha's figure with cols and tma), elsewhere the mha suite once.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
all_tests
soak vision_mha_norm_backward 4 10
race_cli vision_mha_norm_backward 10 40
race_cli vision_mha_norm_backward 4 40
suites_or vision_mha_norm_backward
fin
