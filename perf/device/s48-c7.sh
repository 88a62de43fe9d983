# Forty-eighth session, call 7 (bundle of c3f8a99's binaries): on an H200, the four suites twice (issues 5-8's figures;
# gqa with DKDV auto = batch never measured there); on any card, float64 PyTorch on gqa #1 (the padded path's batch,
# checked at #0 and #7 in the forty-seventh session).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
case $GPU in *H200*) suites 2 ;; *) echo "not an H200: no suites" ;; esac
torch_check 003 1
fin
