# Forty-first session, call 5 (bundle of ATTNBWD_CUDA_GQA_MERGE_OCC): the merge pass compiled for 6 or 8 CTAs per SM
# (40 / 32 registers) against the unbounded kernel (46 registers, 5 CTAs per SM). Count: beside late grad_o_weight
# (64 whole SMs) the pass's 384 CTAs at #13 take two waves on the other 68 SMs at 5 per SM (340), one at 6 (408); #7's
# 440 one at 8 (544); #12's 768 three at 5, two at 6 or 8; on the small path (#2 #5 #11) grad_o_weight holds 100 SMs.
# Prediction: -3 to -5 us at #13, #7, #12 (1.02-1.04x), the small-path workloads similar or less, ~1.00 where the pass
# runs alone (#0, #1: grad_o_weight done by then) or at large T (many waves either way; the spills may cost a little).
# 1. Tests: MergeVariants (the same bits), the switch test. 2. auto / 6 / 8 on all 16 workloads, two interleaved rounds.
# 3. Timeline of #13 with 6.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-440}
P=$M/attnbwd_perf
shards 'CudaGqaRope.MergeVariants*:CudaGqaRope.MalformedSwitches*' 120
timeline gqa_rope_backward 13 gqa-13-occ6 ATTNBWD_CUDA_GQA_MERGE_OCC=6
abrun gqa_rope_backward all 2 merge-occ 380 auto=$P occ6=$P,ATTNBWD_CUDA_GQA_MERGE_OCC=6 \
  occ8=$P,ATTNBWD_CUDA_GQA_MERGE_OCC=8
fin
