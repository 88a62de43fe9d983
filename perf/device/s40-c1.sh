# Fortieth session, call 1: the two mended tests of f40fe9a (DpSoftmax*, PvOnTheSide*), the switch test, and the new
# DxSumAccAndDkSideMatchTheOracle; then two by-name experiments against today's default:
#   ATTNBWD_CUDA_GQA_DXSUM=acc on the separate q/k/v path (#0, #1, #4, #12). Prediction: -3..-6 us a call (the add
#     pass's tail and its traffic beside the weight gradients): 1.01-1.02x.
#   ATTNBWD_CUDA_GQA_DKSIDE=on on the padded GEMM attention path (#0, #1, #7). Prediction: up to -8 us at #0 (1.02x),
#     less at #1; #7 (dP + softmax kernel, smaller GEMMs) ~1.00-1.01x.
# The probe perf/probes/cublaslt_odd_one_dim.cu (built here, carried as .carry/probe_odd). Then a timeline of #0 with both, and float64 PyTorch on #0 and #12 with both where they apply.
source perf/device/common.sh
LIMIT=${LIMIT:-380}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DpSoftmax*:CudaGqaRope.PvOnTheSide*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.DxSumAcc*' 110
ok && timeout $(tmo 70) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,4,12 --rounds 3 \
  --variant add3=$P --variant acc=$P,ATTNBWD_CUDA_GQA_DXSUM=acc --out $R/ab-dxsum.json > $R/ab-dxsum.txt 2>&1
echo "ab dxsum rc=$? t=$SECONDS"; tail -7 $R/ab-dxsum.txt
ok && timeout $(tmo 60) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,7 --rounds 3 \
  --variant off=$P --variant on=$P,ATTNBWD_CUDA_GQA_DKSIDE=on --out $R/ab-dkside.json > $R/ab-dkside.txt 2>&1
echo "ab dkside rc=$? t=$SECONDS"; tail -6 $R/ab-dkside.txt
mkdir -p $R/tl
ok && timeout $(tmo 60) .carry/probe_odd > $R/probe-odd.txt 2>&1; echo "probe rc=$? t=$SECONDS"; cat $R/probe-odd.txt
ok && env ATTNBWD_CUDA_GQA_DXSUM=acc ATTNBWD_CUDA_GQA_DKSIDE=on ATTNBWD_PERF_TIMELINE=$R/tl/gqa-0-both.txt \
  timeout $(tmo 40) $P --backend=cuda --ops=gqa_rope_backward --workloads=0 > /dev/null 2>&1
python3 perf/scripts/timeline.py $R/tl/gqa-0-both.txt > $R/tl/gqa-0-both-print.txt 2>&1; head -30 $R/tl/gqa-0-both-print.txt
ok && env ATTNBWD_CUDA_GQA_DXSUM=acc ATTNBWD_CUDA_GQA_DKSIDE=on timeout $(tmo 60) python3 tests/torch/check_workloads.py \
  --cli $M/attnbwd --ops 003 --workloads 0 --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-0.txt 2>&1
echo "torch 0 rc=$? t=$SECONDS"; tail -3 $R/torch-0.txt
ok && env ATTNBWD_CUDA_GQA_DXSUM=acc timeout $(tmo 50) python3 tests/torch/check_workloads.py \
  --cli $M/attnbwd --ops 003 --workloads 12 --backend cuda --solexec .carry/solexec --no-emulated > $R/torch-12.txt 2>&1
echo "torch 12 rc=$? t=$SECONDS"; tail -3 $R/torch-12.txt
for w in 7 12 13 1; do  # today's default (for the desk: where the time goes now, after DWO_SMS and the dpsm auto)
  ok && env ATTNBWD_PERF_TIMELINE=$R/tl/gqa-$w-auto.txt timeout $(tmo 30) $P --backend=cuda --ops=gqa_rope_backward \
    --workloads=$w > /dev/null 2>&1
  python3 perf/scripts/timeline.py $R/tl/gqa-$w-auto.txt > $R/tl/gqa-$w-auto-print.txt 2>&1
done
echo "tl t=$SECONDS"
fin
