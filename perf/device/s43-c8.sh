# Forty-third session, call 8 (bundle of e13f4ee). (a) ATTNBWD_CUDA_GQA_DWO_SMS beside the GEMM attention path at
# T >= 2048 (auto 84 of 132 SMs) was chosen in the thirty-third session with the tuned dWo algorithm; auto now takes
# the first answer there (256 x 128 tiles, 2 x 4 clusters), which may want another target: 66 / 100 / off against auto at
# #3 #8 #10 #15, three rounds. No prediction of the sign: ±1 %. (b) mha: LT_TUNE=main (side-stream GEMMs untuned)
# against auto, two rounds (gqa's dWo lost its tuned choice's gain beside the attention chain; varlen's did not: call 4).
source perf/device/common.sh
LIMIT=${LIMIT:-270}
P=$M/attnbwd_perf
abrun gqa_rope_backward 3,8,10,15 3 dwo-sms 110 auto=$P sms66=$P,ATTNBWD_CUDA_GQA_DWO_SMS=66 \
  sms100=$P,ATTNBWD_CUDA_GQA_DWO_SMS=100 off=$P,ATTNBWD_CUDA_GQA_DWO_SMS=off
abrun vision_mha_norm_backward all 2 mha-main 140 auto=$P main=$P,ATTNBWD_CUDA_LT_TUNE=main
fin
