# Forty-third session, call 4 (bundle of the new defaults: ATTNBWD_CUDA_GQA_DWO_TUNE auto = the first answer for late
# dWo beside the GEMM attention path at T >= 2048; ATTNBWD_CUDA_GQA_DA_ROWS auto = dA in pieces of 2048 rows at
# T >= 3072 on sm_90). 1. Every CUDA test (three shards). 2. gqa: auto against the old defaults (DWO_TUNE=on
# DA_ROWS=off), all 16, three rounds. Prediction from calls 2-3: geomean +0.3-0.5 %: #3 ~1.03x, #10 ~1.03x, #9 ~1.01x,
# #8 ~1.006x, the others 1.00x. 3. varlen and mha: the side-stream GEMMs' tuned choices beside the attention kernels
# (LT_TUNE=main: caller's-stream GEMMs tuned only) against auto, two rounds: whether gqa's dWo finding holds there.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
shards 'Cuda*:*Cuda*' 300
abrun gqa_rope_backward all 3 new-defaults 110 auto=$P old=$P,ATTNBWD_CUDA_GQA_DWO_TUNE=on,ATTNBWD_CUDA_GQA_DA_ROWS=off
abrun vision_varlen_rope_backward all 2 varlen-main 60 auto=$P main=$P,ATTNBWD_CUDA_LT_TUNE=main
abrun vision_mha_norm_backward all 2 mha-main 60 auto=$P main=$P,ATTNBWD_CUDA_LT_TUNE=main
fin
