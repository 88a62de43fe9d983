# Forty-second session, call 6 (bundle of ATTNBWD_CUDA_THIN_SPLITN): call 4's ncu found the dW warpgroup the critical
# one at MB = 4 (20 of the 32 products per k-block and the dW epilogue; the dX warpgroup 66 % of its samples waiting
# on full slots). on: each consumer warpgroup holds 64 of the slice's 128 columns of dW and of every dX row block
# (m64n64 products: 16 per k-block each at MB = 4; shared-memory operand reads +33 %: 0.0625 B/MAC, 128 B/clk at the
# tensor peak). Prediction: the MB = 4 kernel −10-20 % (#13 and #2: −6 to −12 µs, 1.05-1.09x per call); MB ≤ 3
# (balanced already) 0.97-1.01x. 1. Tests. 2. off / on at #2 #5 #11 #13, two rounds. 3. Timeline #13 on; float64
# PyTorch #13 with on.
source perf/device/common.sh
LIMIT=${LIMIT:-280}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinSplit*:CudaOutProj.ThinPathSplit*:CudaGqaRope.MalformedSwitches*' 90
ok && timeout $(tmo 100) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11,13 --rounds 2 \
  --variant off=$P,ATTNBWD_CUDA_THIN_SPLITN=off --variant on=$P,ATTNBWD_CUDA_THIN_SPLITN=on \
  --out $R/ab-thin-splitn.json > $R/ab-thin-splitn.txt 2>&1
echo "ab rc=$? t=$SECONDS"; tail -7 $R/ab-thin-splitn.txt
mkdir -p $R/tl
ok && env ATTNBWD_CUDA_THIN_SPLITN=on ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-on.txt timeout $(tmo 30) $P --backend=cuda \
  --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-on.log 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-13-on.txt > $R/tl/gqa-13-on-print.txt 2>&1; grep -i -E 'thin|span' $R/tl/gqa-13-on-print.txt | head -3
ok && env ATTNBWD_CUDA_THIN_SPLITN=on timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
  --ops 003 --workloads 13 --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-13.txt 2>&1
echo "torch 13 rc=$? t=$SECONDS"; tail -1 $R/torch-13.txt
fin
