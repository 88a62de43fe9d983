# Fifty-eighth session, call 2+: the four suites twice on the bundle (dc36286 = HEAD's code). Call 1 ran every CUDA
# test on this code (106/106 on an H100), so this call only times: on an H200 these are the issue figures (the first
# with mha's flipped defaults, PTRIM auto = cols and DELTA auto = tma); on an H100 a same-card reference only.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
suites 2
fin
