# Fifty-sixth session's third call: ATTNBWD_CUDA_MHA_DELTA auto = tma (δ by a TMA tensor copy) as the default now.
# (1) every mha test on the default (DeltaCopiesGiveTheSerialBits runs tma and bulk in every ws form);
# (2) racecheck on mha's default path at #10 and #4 (plain GEMMs): call 17 had 0 hazards with DELTA=tma by name.
source perf/device/common.sh
LIMIT=${LIMIT:-150}
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 100
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
for w in 10 4; do
  ok || break
  "$M/attnbwd" gen vision_mha_norm_backward --workload "$w" -o "/tmp/mha-$w.safetensors" > /dev/null 2>&1
  ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout "$(tmo 40)" compute-sanitizer --tool racecheck --print-limit 200 \
    "$M/attnbwd" run vision_mha_norm_backward -i "/tmp/mha-$w.safetensors" -o "/tmp/mha-$w-out.safetensors" \
    > "$R/racecheck-mha-$w.txt" 2>&1
  echo "racecheck mha #$w rc=$? t=$SECONDS"
  grep -E "RACECHECK SUMMARY|Race reported" "$R/racecheck-mha-$w.txt" | sed 's/+0x[0-9a-f]*//' | sort | uniq -c | head -8
done
fin
