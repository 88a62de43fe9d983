# Fifty-eighth session: the first GPU run of ATTNBWD_CUDA_GQA_THIN_MCAST (built this session, auto = off).
# (1) its test alone under a 120 s cap (a barrier protocol error would hang); (2) gqa's and out_proj's CUDA tests in
#     three shards (the thin kernel's m = 1 path changed too: the CTA-to-slice mapping and the slot release);
# (3) if (1) passed, interleaved rounds off / 2 / 4 at the thin workloads #2, #5, #11, #13 and #11's timelines;
# (4) on an H200 the four suites twice (issue figures; the defaults did not change), elsewhere nothing more.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
ok && timeout "$(tmo 120)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.ThinQkvMulticast*' > "$R/tests-mcast.txt" 2>&1
echo "mcast test rc=$? t=$SECONDS"; grep -E "PASSED|FAILED|OK \]|Failure|Error" "$R/tests-mcast.txt" | head -12
mc_ok=0; grep -q "PASSED.*1 test" "$R/tests-mcast.txt" && mc_ok=1
shards 'CudaGqaRope.*:CudaOutProj.*:-CudaGqaRope.ThinQkvMulticast*' 170
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
if [ $mc_ok = 1 ]; then
  abrun gqa_rope_backward 2,5,11,13 3 thin-mcast 150 off="$P" m2="$P,ATTNBWD_CUDA_GQA_THIN_MCAST=2" \
    m4="$P,ATTNBWD_CUDA_GQA_THIN_MCAST=4"
  timeline gqa_rope_backward 11 gqa-11-mcast-off
  timeline gqa_rope_backward 11 gqa-11-mcast-2 ATTNBWD_CUDA_GQA_THIN_MCAST=2
  timeline gqa_rope_backward 13 gqa-13-mcast-off
  timeline gqa_rope_backward 13 gqa-13-mcast-2 ATTNBWD_CUDA_GQA_THIN_MCAST=2
fi
case $GPU in
  *H200*) suites 2 ;;
esac
fin
