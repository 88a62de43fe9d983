# Forty-seventh session, call 7 (an H200 if lent): the four suites twice on 5741b85's binaries (DKDV auto = batch).
source perf/device/common.sh
LIMIT=${LIMIT:-150}
P=$M/attnbwd_perf
suites 2
fin
