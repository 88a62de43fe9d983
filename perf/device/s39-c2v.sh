# Thirty-ninth session, call 2 (short: the device time left): the two mended tests (f40fe9a) and the dP + softmax
# tests; timelines of gqa #6 and #11 with PV main and side (why side lost); memcheck on the PV test.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
T=$M/attnbwd_tests
shards 'CudaGqaRope.DpSoftmax*:CudaGqaRope.PvOnTheSide*:CudaGqaRope.MalformedSwitches*' 90
mkdir -p $R/tl
for v in "6 main" "6 side" "11 main" "11 side"; do
  set -- $v
  ok && env ATTNBWD_CUDA_GQA_PV=$2 ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$1-$2.txt timeout $(tmo 40) $P \
    --backend=cuda --ops=gqa_rope_backward --workloads=$1 > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$1-$2.txt > $R/tl/gqa-$1-$2-print.txt 2>&1
  head -30 $R/tl/gqa-$1-$2-print.txt
done
echo "tl t=$SECONDS"
ok && timeout $(tmo 80) compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.PvOnTheSideStream*' > $R/memcheck-pv.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pv.txt | tail -3
fin
