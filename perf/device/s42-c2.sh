# Forty-second session, call 2 (bundle of ATTNBWD_CUDA_THIN_SUM): the thin launch's partials summed in the kernel by the
# slice's CTAs meeting on a counter (meet; meetcoop: a cooperative launch, without PDL after the merge pass), against
# the second launch (launch: its tail ~6 us after the main kernel at #13 on both GPUs, call 1's and the fortieth
# session's timelines). Count: each CTA sums a third of its slice (128 KB of partials at T = 256 from L2, ~1-1.5 us
# after the slice's last CTA): -4 to -5 us at #2 #5 #11 #13 (1.03-1.05x) for meet; meetcoop loses the PDL overlap
# with the merge pass (~1-2 us). 1. Tests. 2. launch / meet / meetcoop at #2 #5 #11 #13, three rounds. 3. Timeline #13
# meet; float64 PyTorch #13, #5 with meet. 4. memcheck and racecheck on out_proj's in-kernel-sum test (meet only).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.Thin*:CudaOutProj.Thin*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*:CudaGraphs.Gqa*' 150
ok && timeout $(tmo 170) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 2,5,11,13 --rounds 3 \
  --variant launch=$P,ATTNBWD_CUDA_THIN_SUM=launch --variant meet=$P,ATTNBWD_CUDA_THIN_SUM=meet \
  --variant meetcoop=$P,ATTNBWD_CUDA_THIN_SUM=meetcoop --out $R/ab-thin-sum.json > $R/ab-thin-sum.txt 2>&1
echo "ab thin-sum rc=$? t=$SECONDS"; tail -10 $R/ab-thin-sum.txt
mkdir -p $R/tl
for v in meet meetcoop; do
  ok && env ATTNBWD_CUDA_THIN_SUM=$v ATTNBWD_PERF_TIMELINE=$R/tl/gqa-13-$v.txt timeout $(tmo 30) $P --backend=cuda \
    --ops=gqa_rope_backward --workloads=13 > $R/tl/gqa-13-$v.log 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-13-$v.txt > $R/tl/gqa-13-$v-print.txt 2>&1; grep -i -E 'thin|merge|span' $R/tl/gqa-13-$v-print.txt | head -4
done
for w in 13 5; do
  ok && env ATTNBWD_CUDA_THIN_SUM=meet timeout $(tmo 50) python3 tests/torch/check_workloads.py --cli $M/attnbwd \
    --ops 003 --workloads $w --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-$w.txt 2>&1
  echo "torch $w rc=$? t=$SECONDS"; tail -2 $R/torch-$w.txt
done
for tool in memcheck racecheck; do
  ok && env ATTNBWD_CUDA_THIN_SUM=meet timeout $(tmo 100) compute-sanitizer --tool $tool --error-exitcode 9 $M/attnbwd_tests \
    --gtest_filter='CudaOutProj.ThinPathMatches*' > $R/$tool-meet.txt 2>&1
  echo "$tool rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool-meet.txt | tail -3
done
fin
