# Next session, call 2 (written in the forty-fourth session, which had no GPU): the A/Bs that never ran.
# 1. varlen's two GPU-less variants of the thirty-seventh session, never measured (their tests passed in the fortieth
#    and forty-third sessions' full runs): ATTNBWD_CUDA_VARLEN_BIASROPE=vec1 (bias + RoPE with one task per thread,
#    every load issued at once: predicted -5 to -8 µs at #8 #11 #1, +0.5 % of varlen's geomean) and
#    ATTNBWD_CUDA_VARLEN_TABLE=side (the block table off the main chain: -3 to -4 µs per call), at the eight
#    workloads of S <= 919, two rounds.
# 2. s43-c8's DWO_SMS 66 / 100 / off against auto (84) at #3 #8 #10 #15: 84 was chosen with the tuned dWo algorithm,
#    and the first heuristic answer runs there since the forty-third session.
# 3. out_proj's cuBLASLt path (sm_100's today; forced here) with and without ATTNBWD_CUDA_OUT_PROJ_DX=heads over the 16
#    (two rounds), after its test. Count: the head-split copy is T·hidden·4 bytes (~14 µs at T = 8192 on an H200).
# 4. mha LT_TUNE=main against auto over the 16 (cut by its time cap in the forty-third session).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
abrun vision_varlen_rope_backward 0,1,3,5,7,8,11,12 2 varlen-s37 120 auto=$P vec1=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec1 \
  side=$P,ATTNBWD_CUDA_VARLEN_TABLE=side both=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec1,ATTNBWD_CUDA_VARLEN_TABLE=side
timeline vision_varlen_rope_backward 8 varlen-8-both ATTNBWD_CUDA_VARLEN_BIASROPE=vec1 ATTNBWD_CUDA_VARLEN_TABLE=side
abrun gqa_rope_backward 3,8,10,15 2 dwo-sms 100 auto=$P sms66=$P,ATTNBWD_CUDA_GQA_DWO_SMS=66 \
  sms100=$P,ATTNBWD_CUDA_GQA_DWO_SMS=100 off=$P,ATTNBWD_CUDA_GQA_DWO_SMS=off
shards 'CudaOutProj.CublasLtPath*' 60
abrun out_proj_backward all 2 outproj-lt-heads 60 lt=$P,ATTNBWD_CUDA_OUT_PROJ=cublaslt \
  ltheads=$P,ATTNBWD_CUDA_OUT_PROJ=cublaslt,ATTNBWD_CUDA_OUT_PROJ_DX=heads
abrun vision_mha_norm_backward all 2 mha-main 200 auto=$P main=$P,ATTNBWD_CUDA_LT_TUNE=main
fin
