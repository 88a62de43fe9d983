# Next session, call 2 (written in the forty-fifth session; ran as written in the forty-sixth, 90 s on an H200; still
# the plan: no H200 suite since): the four
# ops' suites, two each (issues 5-8's figures).
# On an H100 the suites still run (E then against the H200 model: label the results h100).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
suites 2
fin
