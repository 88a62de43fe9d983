# Fifty-eighth session: KVDQ=ws (the dQ pass warp-specialised: TMA producer, two consumer warpgroups on mbarriers;
# built this session) — (1) the KVDQ test alone under a 150 s cap (on, ws: the same bits as on, oracle); (2) if it
# passed: interleaved rounds off / on / ws at #4, #6, #9, #14 and #6's timeline with ws; (3) on an H200 the suites twice.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
ok && timeout "$(tmo 150)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.KeyMajorDqPass*' > "$R/tests-kvdq.txt" 2>&1
echo "kvdq test rc=$? t=$SECONDS"; grep -E "PASSED|FAILED|OK \]|Failure|ws against" "$R/tests-kvdq.txt" | head -12
if grep -q "PASSED.*1 test" "$R/tests-kvdq.txt"; then
  abrun gqa_rope_backward 4,6,9,14 3 kvdq3 200 off="$P" on="$P,ATTNBWD_CUDA_GQA_KVDQ=on" ws="$P,ATTNBWD_CUDA_GQA_KVDQ=ws"
  timeline gqa_rope_backward 6 gqa-6-kvdq-ws ATTNBWD_CUDA_GQA_KVDQ=ws
fi
case $GPU in
  *H200*) suites 2 ;;
esac
fin
