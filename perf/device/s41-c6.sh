# Forty-first session, call 6 (bundle of the session's last code; default paths as a594b9d's but for the PDL attribute
# helper): the out_proj and gqa suites, on an H200 only (elsewhere it stops at once).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
case $GPU in *H200*) ;; *) echo "not an H200: no suites"; fin; exit 0 ;; esac
ok && PB suite-out_proj_backward $P out_proj_backward all
ok && PB suite-gqa_rope_backward $P gqa_rope_backward all
suite_e $R/suite-out_proj_backward.json $R/suite-gqa_rope_backward.json
fin
