# Fifty-sixth session's first call. Rebundle first with 4d9b038's perf binary as perf-prev (the fifty-fifth session
# left it at /work/prev/perf-4d9b038; else extract attnbwd_perf from a bundle of 4d9b038):
#   bash perf/device/bundle.sh --extra perf-prev=/work/prev/perf-4d9b038
# (1) every mha test: 7b39e1c templated the dK/dV consumer loop on the slots' row stride and added
#     ATTNBWD_CUDA_MHA_PTRIM=cols (never run on a GPU; NarrowTailGivesTheSerialBits runs it at S = 577, 131, 197, 198);
#     then #4 alone 10 times under 8 s caps (the default's dK/dV kernel code changed: the fused launch's soak);
# (2) the A/B at #8, #13, #4, #10, three rounds: prev (4d9b038: the default before the template) / auto / cols;
#     the predicted cols: the dK/dV kernel ~−3 %, the op ~0.7 % at large B; auto within noise of prev;
# (3) the key-split lead's first count: perf/probes/cluster_delta_exchange.cu, built here, at mha #8's 368 heads with
#     work 0, 256 and 1024, and at #10's 16 heads (what a per-block exchange of δ's partial sums across a head's
#     cluster of 5 costs, lags 0-3; the fifty-fifth session's NOTES say what each answer means);
# (4) on an H200 the four suites twice (the issue figures: mha's first with PTRIM and the producer fix on an H200),
#     elsewhere the mha suite once;
# (5) racecheck on mha's default path at #10 and #4 with cuBLASLt kept out (ATTNBWD_CUDA_SANITIZE_GEMM=plain).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
soak vision_mha_norm_backward 4 10
if [ -x "$M/perf-prev" ]; then
  abrun vision_mha_norm_backward 8,13,4,10 3 cols 150 prev="$M/perf-prev" auto="$P" \
    cols="$P,ATTNBWD_CUDA_MHA_PTRIM=cols"
else
  abrun vision_mha_norm_backward 8,13,4,10 3 cols 150 auto="$P" cols="$P,ATTNBWD_CUDA_MHA_PTRIM=cols"
fi
ok && nvcc -std=c++17 -O2 -arch=sm_90a -o /tmp/cde perf/probes/cluster_delta_exchange.cu &&
  { timeout "$(tmo 90)" /tmp/cde 368 0 256 1024; timeout "$(tmo 30)" /tmp/cde 16 0 256; } 2>&1 |
  tee "$R/probe-delta-exchange.txt"
echo "probe t=$SECONDS"
case $GPU in
  *H200*) suites 2 ;;
  *) ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all; suite_e "$R"/suite-*.json ;;
esac
# racecheck on mha's default path (the device records hold no racecheck of an mha workload after 2026-12-01, before
# the fused launch and the P trims): #10 (B = 1, two ws launches with PDL) and #4 (B = 2, the fused launch)
for w in 10 4; do
  ok || break
  "$M/attnbwd" gen vision_mha_norm_backward --workload "$w" -o "/tmp/mha-$w.safetensors" > /dev/null 2>&1
  ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout "$(tmo 100)" compute-sanitizer --tool racecheck --print-limit 200 \
    "$M/attnbwd" run vision_mha_norm_backward -i "/tmp/mha-$w.safetensors" -o "/tmp/mha-$w-out.safetensors" \
    > "$R/racecheck-mha-$w.txt" 2>&1
  echo "racecheck mha #$w rc=$? t=$SECONDS"; grep -E "RACECHECK SUMMARY|Race reported" "$R/racecheck-mha-$w.txt" |
    sed 's/+0x[0-9a-f]*//' | sort | uniq -c | head -8
done
fin
