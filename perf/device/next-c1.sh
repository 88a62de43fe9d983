# Next session, call 1: the first GPU run of 345e9b2 (gemm_half, sms_of_132), the dP + softmax kernel v3
# (bc36549..20d564d) and 9757bd3 (the code probe, mha switches off sm_90): every CUDA test in three shards, the
# 100a-only CLI on the H200, sanitizers on the kernel's test, float64 PyTorch on gqa with both forms.
source perf/device/common.sh
LIMIT=520
T=$M/attnbwd_tests
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
for i in 0 1 2; do
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout $(tmo 330) $T --gtest_filter='Cuda*:*Cuda*' > $R/tests-$i.txt 2>&1 &
done
wait
echo "tests t=$SECONDS"; grep -hE '^\[ +(PASSED|FAILED) +\]|FAILED  \]' $R/tests-*.txt
# a 100a-only build's CLI (bin-new/attnbwd-100a, built with ATTNBWD_CUDA_ARCHITECTURES=100a) on the H200: the
# context finds no image for the device, so auto must report the portable backend and --backend cuda an Error naming
# options.backend (9757bd3)
if ok; then
  timeout $(tmo 60) $M/attnbwd gen out_proj_backward --workload 8 -o /tmp/op8.st > /dev/null 2>&1
  timeout $(tmo 60) $M/attnbwd-100a run out_proj_backward -i /tmp/op8.st -o /tmp/op8-auto.st > $R/a100-auto.txt 2>&1; echo "100a auto rc=$?"
  timeout $(tmo 60) $M/attnbwd-100a run out_proj_backward -i /tmp/op8.st -o /tmp/op8-cuda.st --backend cuda > $R/a100-cuda.txt 2>&1; echo "100a cuda rc=$?"
  timeout $(tmo 60) $M/attnbwd run out_proj_backward -i /tmp/op8.st -o /tmp/op8-fast.st > $R/a90-auto.txt 2>&1; echo "90a auto rc=$?"
  tail -2 $R/a100-auto.txt $R/a100-cuda.txt $R/a90-auto.txt
fi
ok && timeout $(tmo 150) compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaGqaRope.DpSoftmax*' > $R/memcheck-dpsm.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; tail -3 $R/memcheck-dpsm.txt
for tool in racecheck synccheck; do  # racecheck with the plain GEMM: cuBLASLt's kernels are its false positives
  ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 90) compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='CudaGqaRope.DpSoftmax*' > $R/$tool-dpsm.txt 2>&1
  echo "$tool rc=$? t=$SECONDS"; tail -3 $R/$tool-dpsm.txt
done
for v in on wide; do
  ok && ATTNBWD_CUDA_GQA_DPSM=$v timeout $(tmo 60) python3 tests/torch/check_workloads.py --cli $M/attnbwd --ops 003 --workloads 0,10 --backend cuda > $R/torch-$v.txt 2>&1
  echo "torch $v rc=$? t=$SECONDS"; tail -3 $R/torch-$v.txt
done
fin
