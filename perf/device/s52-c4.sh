# Fifty-second session, call 4: on an H200 only, the four suites twice on main (the issue figures; the last H200 suites
# are the forty-sixth session's); on any other GPU nothing (device time is short). Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
case $GPU in *H200*) suites ${N:-2} ;; *) echo "not an H200: no suites" ;; esac
fin
