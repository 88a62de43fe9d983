# Forty-third session, call 3. (a) ATTNBWD_CUDA_GQA_DWO_TUNE auto now takes cuBLASLt's first answer for late dWo beside
# the GEMM attention path at T >= 2048 (call 2: off against on #3 1.020x, #10 1.014x, #8 1.006x, #15 1.004x; small T
# 0.98-0.99x): auto against on (the old default) over all 16, three rounds. Prediction: geomean +0.2-0.3 %, #3 #8 #10
# #15 faster, the others equal. (b) ATTNBWD_CUDA_GQA_DA_ROWS=2048 (dA as GEMMs of <= 2048 rows: T = 2048 starts its
# kernel without the memset and the 10-19 µs gap seen at T >= 3072). Count: -10 to -18 µs at #3, #9, #10 (0.7-1.3 %),
# unless a piece's own tail costs it back; 1.000x elsewhere (one piece). 1. Tests. 2. A/B. 3. Timeline #3 DA_ROWS=2048.
source perf/device/common.sh
LIMIT=${LIMIT:-360}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DwoFirst*:CudaGqaRope.DaRow*:CudaGqaRope.Malformed*:CudaGqaRope.DwoSm*' 100
abrun gqa_rope_backward all 3 dwo-auto 200 auto=$P dwoon=$P,ATTNBWD_CUDA_GQA_DWO_TUNE=on \
  darows=$P,ATTNBWD_CUDA_GQA_DA_ROWS=2048
timeline gqa_rope_backward 3 gqa-3-darows ATTNBWD_CUDA_GQA_DA_ROWS=2048 | head -6
timeline gqa_rope_backward 10 gqa-10-darows ATTNBWD_CUDA_GQA_DA_ROWS=2048 | head -6
fin
