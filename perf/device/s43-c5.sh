# Forty-third session, call 5 (bundle of e13f4ee, the session's defaults): gqa suites on an H200 only (elsewhere it
# stops at once), interleaved: the new defaults three times, the old (DWO_TUNE=on, DA_ROWS=off) twice.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
case $GPU in *H200*) ;; *) echo "not an H200: no suites"; fin; exit 0 ;; esac
for i in 1 2; do
  ok && PB suite-gqa-new-$i $P gqa_rope_backward all
  ok && PB suite-gqa-old-$i $P gqa_rope_backward all ATTNBWD_CUDA_GQA_DWO_TUNE=on ATTNBWD_CUDA_GQA_DA_ROWS=off
done
ok && PB suite-gqa-new-3 $P gqa_rope_backward all
suite_e $R/suite-gqa-new-1.json $R/suite-gqa-old-1.json $R/suite-gqa-new-2.json $R/suite-gqa-old-2.json $R/suite-gqa-new-3.json
fin
