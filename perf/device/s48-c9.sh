# Forty-eighth session, call 9: ATTNBWD_CUDA_THIN_SPAN=on (the thin kernel's spanned split, built this session, never run).
# 1. Its tests and the thin kernel's neighbours (three shards, 150 s); the rest only if they all passed.
# 2. auto (plain split) against span at gqa #2, #5, #11, #13 (three interleaved rounds; counted −3 to −4 µs at T = 256).
# 3. memcheck and racecheck on the out_proj span test (the kernel alone: no cuBLASLt there); a timeline of gqa #13 with span.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
shards 'CudaOutProj.Thin*:CudaGqaRope.ThinQkv*:CudaGqaRope.QkvLaunches*:CudaOutProj.HybridPath*' 150
if grep -q "FAILED" "$R"/tests-*.txt || [ "$(grep -h '^\[  PASSED  \]' "$R"/tests-*.txt | wc -l)" -ne 3 ]; then
  echo "tests did not all pass: stop"; grep -h -B3 -A12 "Failure\|FAILED\|timeout" "$R"/tests-*.txt | head -60
else
  abrun gqa_rope_backward 2,5,11,13 3 thin-span 90 auto=$P span=$P,ATTNBWD_CUDA_THIN_SPAN=on
  sanitize memcheck 'CudaOutProj.ThinSpanned*' span-mem 60
  sanitize racecheck 'CudaOutProj.ThinSpanned*' span-race 90
  ok && timeline gqa_rope_backward 13 gqa-13-thin-span ATTNBWD_CUDA_THIN_SPAN=on
fi
fin
