# Thirty-sixth session, call 4: auto takes the dP + softmax kernel on padded attention whose grid fits one wave.
# gqa's CUDA tests (three shards), A/B auto against off on all 16 workloads (two rounds), racecheck on the kernel's
# tests with the plain GEMM (cuBLASLt's kernels are false positives for racecheck; ATTNBWD_CUDA_SANITIZE_GEMM).
source perf/device/common.sh
LIMIT=${LIMIT:-420}
T=$M/attnbwd_tests
P=$M/attnbwd_perf
F='CudaGqaRope.*:CudaGraphs.Gqa*:CudaDeterminism.Gqa*:CudaConcurrency.Gqa*'
shards "$F" 200
ok && timeout $(tmo 100) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads all --rounds 2 \
  --variant auto=$P --variant off=$P,ATTNBWD_CUDA_GQA_DPSM=off --out $R/ab-auto.json > $R/ab-auto.txt 2>&1
echo "ab rc=$? t=$SECONDS"; tail -22 $R/ab-auto.txt
ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 150) compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.DpSoftmax*' > $R/racecheck-dpsm.txt 2>&1
echo "racecheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/racecheck-dpsm.txt | tail -4
fin
