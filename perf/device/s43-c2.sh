# Forty-third session, call 2 (bundle of ATTNBWD_CUDA_GQA_DWO_TUNE). Call 1 (next-c1.sh, H100): at #3 and #10 the
# tuned grad_o_weight algorithm (candidate 5: 128 x 128 tiles, 4 x 2 clusters; 234.7 against the first answer's 245.1
# µs timed alone at #10) ran 309.6 / 402.8 µs beside the attention chain against the first answer's 285.3 / 364.5
# (256 x 128, 2 x 4) under ATTNBWD_CUDA_LT_TUNE=off, and the calls were 1.019x / 1.025x faster untuned. DWO_TUNE=off
# takes the first answer for dWo only. Prediction: #3, #9, #10 1.01-1.03x, the T = 2048 forms (#6, #8, #14, #15) ~1.00-
# 1.01x, small T ±0.5 % (dWo's choice there may be the first answer already). 1. Tests. 2. auto / DWO_TUNE=off /
# LT_TUNE=main over all 16, three interleaved rounds. 3. Timelines #10 #3 with off. 4. float64 PyTorch at #10 with off.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.DwoFirst*:CudaGqaRope.MalformedSwitches*:CudaDeterminism.*:*Tuned*' 90
abrun gqa_rope_backward all 3 dwo-tune 300 auto=$P dwooff=$P,ATTNBWD_CUDA_GQA_DWO_TUNE=off \
  main=$P,ATTNBWD_CUDA_LT_TUNE=main
for w in 10 3; do timeline gqa_rope_backward $w gqa-$w-dwooff ATTNBWD_CUDA_GQA_DWO_TUNE=off | head -9; done
torch_check 003 10 ATTNBWD_CUDA_GQA_DWO_TUNE=off
fin
