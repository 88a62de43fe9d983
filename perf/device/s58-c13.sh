# Fifty-eighth session: the key-major ws kernel's r by a TMA tensor copy instead of a plain bulk copy (racecheck's
# 18 reports in call 12) — (1) every gqa CUDA test in three shards; (2) racecheck (plain GEMMs) on the KVDQ test and the
# key-major kernel test, memcheck on the key-major tests; (3) on an H200 the four suites twice (issue figures: gqa's
# first with KVDQ), elsewhere the gqa suite once.
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.*:*Gqa*' 170
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -30
sanitize racecheck 'CudaGqaRope.KeyMajor*' keymajor 170 ATTNBWD_CUDA_SANITIZE_GEMM=plain &
sanitize memcheck 'CudaGqaRope.KeyMajor*' keymajor 170 &
wait
grep -E "Race reported" "$R/racecheck-keymajor.txt" | sed 's/+0x[0-9a-f]*//' | sort | uniq -c | head -5
case $GPU in
  *H200*) suites 2 ;;
  *) ok && PB suite-gqa_rope_backward-1 "$P" gqa_rope_backward all; suite_e "$R"/suite-*.json ;;
esac
fin
