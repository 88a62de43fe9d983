# Fifty-eighth session: KVDQ auto = ws (ab5d143) on a GPU — (1) every gqa CUDA test ('CudaGqaRope.*:*Gqa*': the op's
# own, concurrency, determinism, graph replays, NaN/Inf) in three shards; (2) compute-sanitizer memcheck, racecheck
# (plain GEMMs) and synccheck on the KVDQ test (the new mbarrier kernel at S = 128-1024) at once; (3) float64 PyTorch
# on #6 and #9 with the defaults; (4) the gqa suite twice (same card as call 2's 0.5019 / 0.5018), and on an H200 the
# four suites twice instead.
source perf/device/common.sh
LIMIT=${LIMIT:-560}
P=$M/attnbwd_perf
shards 'CudaGqaRope.*:*Gqa*' 170
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -30
sanitize memcheck 'CudaGqaRope.KeyMajorDqPass*' kvdq 150 &
sanitize racecheck 'CudaGqaRope.KeyMajorDqPass*' kvdq 150 ATTNBWD_CUDA_SANITIZE_GEMM=plain &
sanitize synccheck 'CudaGqaRope.KeyMajorDqPass*' kvdq 150 &
wait
torch_check gqa_rope_backward 6
torch_check gqa_rope_backward 9
case $GPU in
  *H200*) suites 2 ;;
  *) for k in 1 2; do ok && PB "suite-gqa_rope_backward-$k" "$P" gqa_rope_backward all; done; suite_e "$R"/suite-*.json ;;
esac
fin
