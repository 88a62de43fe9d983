# Thirty-ninth session, call 2 (after call 1's winners were made auto and the bundle remade):
# 1. gqa's tests that run the autos (workloads, determinism, graphs, threads, NaN/Inf), three shards;
# 2. float64 PyTorch on the workloads whose path the new autos change (W, default 6,11,7,0);
# 3. memcheck on the PV test, racecheck on the dP + softmax, PV and KVW tests (plain GEMMs);
# 4. gqa's 16 workloads as the suite runs them, the previous autos (forced by name: OLD) against the new autos, two
#    interleaved rounds: the results JSON and the closing note's numbers.
source perf/device/common.sh
LIMIT=${LIMIT:-575}
P=$M/attnbwd_perf
T=$M/attnbwd_tests
OLD=${OLD:-ATTNBWD_CUDA_GQA_PV=main,ATTNBWD_CUDA_GQA_KVW=after,ATTNBWD_CUDA_GQA_ROWS=1}
shards 'CudaGqaRope.SmallShapes*:CudaGqaRope.RealWorkloads*:CudaGqaRope.RunsAreBitIdentical:CudaGqaRope.PvOnTheSide*:CudaDeterminism.Gqa*:CudaGraphs.Gqa*:CudaConcurrency.Gqa*:CudaNanInf.GqaRope*' 150
ok && timeout $(tmo 90) python3 tests/torch/check_workloads.py --cli $M/attnbwd --ops 003 --workloads ${W:-6,11,7,0} \
  --backend cuda --solexec .carry/solexec --no-emulated > $R/torch.txt 2>&1
echo "torch rc=$? t=$SECONDS"; tail -8 $R/torch.txt
ok && timeout $(tmo 300) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads all --rounds 2 \
  --variant old=$P,$OLD --variant new=$P --out $R/ab-suite.json > $R/ab-suite.txt 2>&1
echo "ab suite rc=$? t=$SECONDS"; tail -22 $R/ab-suite.txt
ok && timeout $(tmo 60) compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.PvOnTheSideStream*' > $R/memcheck-pv.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pv.txt | tail -3
ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 120) compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.DpSoftmaxKernel*:CudaGqaRope.PvOnTheSideStream*:CudaGqaRope.KvWeightGradientsUnder*' \
  > $R/racecheck-pv.txt 2>&1
echo "racecheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/racecheck-pv.txt | tail -3
fin
