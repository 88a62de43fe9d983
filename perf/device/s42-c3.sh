# Forty-second session, call 3 (bundle of ATTNBWD_CUDA_THIN_SUM=meetwide): call 2 measured meet 0.954-0.965x and
# meetcoop 0.934-0.941x of launch at #2 #5 #11 #13 (H100); the #13 timeline: meet's kernel 83.9 us against launch's
# 71.5 + a 6 us tail, so its in-kernel sum took ~12 us: reduce_units keeps two units' loads in flight per thread (about
# six L2 round trips per warpgroup). meetwide issues every load of a range at once (three round trips at ranges = 3).
# Count: L2 traffic 15.7 MB at ~5 TB/s ≈ 3 us, plus the wait for the slice's last CTA: ~3-4 us against launch's 6.
# Prediction: meetwide 1.00-1.02x of launch. 1. Tests. 2. launch / meetwide / meet at #2 #5 #11 #13, three rounds.
# 3. Timeline #13 meetwide; float64 PyTorch #13 with meetwide.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinSum*:CudaOutProj.ThinPathSumming*:CudaGqaRope.MalformedSwitches*' 120
ok && timeout $(tmo 130) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11,13 --rounds 3 \
  --variant launch=$P,ATTNBWD_CUDA_THIN_SUM=launch --variant meetwide=$P,ATTNBWD_CUDA_THIN_SUM=meetwide \
  --variant meet=$P,ATTNBWD_CUDA_THIN_SUM=meet --out $R/ab-thin-sum-wide.json > $R/ab-thin-sum-wide.txt 2>&1
echo "ab rc=$? t=$SECONDS"; tail -8 $R/ab-thin-sum-wide.txt
mkdir -p $R/tl
ok && env ATTNBWD_CUDA_THIN_SUM=meetwide ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-meetwide.txt timeout $(tmo 30) $P --backend=cuda \
  --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-meetwide.log 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-13-meetwide.txt > $R/tl/gqa-13-meetwide-print.txt 2>&1; grep -i -E 'thin|merge|span' $R/tl/gqa-13-meetwide-print.txt | head -4
ok && env ATTNBWD_CUDA_THIN_SUM=meetwide timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
  --ops 003 --workloads 13 --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-13.txt 2>&1
echo "torch 13 rc=$? t=$SECONDS"; tail -1 $R/torch-13.txt
fin
