# Fifty-sixth session's second call (ran as call 17 on an H100; afterwards the probe of step 2 was removed: its
# 1-D tensor map did not encode, so it never ran, and the library's own racecheck with DELTA=tma answered it).
# Its tests DeltaByTensorMap* are now DeltaCopiesGiveTheSerialBits and DeltaTmaWithAnotherSchemeIsAnError.
# Rebundle first with 0db8e88's perf binary as perf-prev (PTRIM auto = on):
#   bash perf/device/bundle.sh --extra perf-prev=/work/prev/perf-0db8e88
# (1) every mha test: PTRIM auto = cols where the dK/dV kernel takes P by TMA (call 1: cols 1.004-1.008x against on,
#     H200), and NarrowTailGivesTheSerialBits with B = 2 at S = 197 (call 1 threw there: B·H·S = 394, not a
#     multiple of 4, so the ws kernels refused the shape before any cols run at S = 197 / 198); then the #4 soak;
# (2) the racecheck probe (perf/probes/racecheck_bulk_mbarrier.cu): the same mbarrier ring filled by cp.async.bulk,
#     by cp.async.bulk.tensor and by plain stores; call 1's racecheck of mha #10 / #4 reported only bulk_load (δ)
#     against ds_transposed;
# (3) racecheck on mha #10 and #4 (plain GEMMs) with ATTNBWD_CUDA_MHA_DELTA=tma (δ by a TMA tensor copy, built after
#     call 1; its tests DeltaByTensorMap* are among step 1's): if the probe says racecheck does not model bulk copies,
#     the tma form should leave no report;
# (4) A/B prev (0db8e88, auto = on) / auto (= cols now) / DELTA=tma at #8, #13, #4, #10, three rounds; the mha suite
#     once (cut to fit the session's last ~450 s of device time).
source perf/device/common.sh
LIMIT=${LIMIT:-260}
P=$M/attnbwd_perf
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
soak vision_mha_norm_backward 4 10
ok && nvcc -std=c++17 -O2 -arch=sm_90a -o /tmp/rb perf/probes/racecheck_bulk_mbarrier.cu -lcuda &&
  for m in bulk tensor generic; do
    /tmp/rb "$m"
    timeout "$(tmo 30)" compute-sanitizer --tool racecheck --print-limit 20 /tmp/rb "$m" 2>&1 |
      sed 's/+0x[0-9a-f]*//' | grep -E "Race reported|RACECHECK SUMMARY|sums differ" | sort | uniq -c | head -6
  done 2>&1 | tee "$R/probe-racecheck-bulk.txt"
echo "probe t=$SECONDS"
for w in 10 4; do
  ok || break
  "$M/attnbwd" gen vision_mha_norm_backward --workload "$w" -o "/tmp/mha-$w.safetensors" > /dev/null 2>&1
  ATTNBWD_CUDA_SANITIZE_GEMM=plain ATTNBWD_CUDA_MHA_DELTA=tma timeout "$(tmo 60)" compute-sanitizer --tool racecheck \
    --print-limit 200 "$M/attnbwd" run vision_mha_norm_backward -i "/tmp/mha-$w.safetensors" \
    -o "/tmp/mha-$w-out.safetensors" > "$R/racecheck-mha-$w-delta-tma.txt" 2>&1
  echo "racecheck mha #$w DELTA=tma rc=$? t=$SECONDS"
  grep -E "RACECHECK SUMMARY|Race reported|Read access" "$R/racecheck-mha-$w-delta-tma.txt" |
    sed 's/+0x[0-9a-f]*//;s/(const float.*)/(…)/' | sort | uniq -c | head -8
done
if [ -x "$M/perf-prev" ]; then
  abrun vision_mha_norm_backward 8,13,4,10 3 ptrim-auto 150 prev="$M/perf-prev" auto="$P" \
    tma="$P,ATTNBWD_CUDA_MHA_DELTA=tma"
fi
ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all
suite_e "$R"/suite-*.json
fin
