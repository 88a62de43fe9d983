# Forty-first session, call 4 (bundle of ATTNBWD_CUDA_GQA_MERGE_PDL): the merge pass as a programmatic dependent of
# dK32's GEMM (dQ's GEMM queued first), so its q slots may run beside that GEMM. 1. Tests: the new MergeAfterDk test,
# the switch test; memcheck on the new test. 2. on against off at the nine GEMM-attention-path workloads (#0 #1 #3 #7 #8
# #10 #12 #13 #15), two interleaved rounds (graphs on: the programmatic edge captured). Prediction: 1.01-1.04x at #13,
# #12, #7, #0, #1 where cuBLASLt's dK32 kernel lets dependents start early (the pass's 10-12 us beside grad_o_weight,
# two thirds of it then beside the GEMM); 1.00 where it does not (the timeline shows which: the pass's start against the
# GEMM's end). 3. Timeline #13 on; float64 PyTorch #13 and #7 with on.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-420}
P=$M/attnbwd_perf
shards 'CudaGqaRope.MergeAfterDk*:CudaGqaRope.MalformedSwitches*' 120
sanitize memcheck 'CudaGqaRope.MergeAfterDk*' merge-pdl 90
timeline gqa_rope_backward 13 gqa-13-on ATTNBWD_CUDA_GQA_MERGE_PDL=on
abrun gqa_rope_backward 0,1,3,7,8,10,12,13,15 2 merge-pdl 150 off=$P on=$P,ATTNBWD_CUDA_GQA_MERGE_PDL=on
for w in 13 7; do torch_check 003 $w ATTNBWD_CUDA_GQA_MERGE_PDL=on; done
fin
