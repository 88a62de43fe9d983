# Forty-first session, call 7 (bundle of ATTNBWD_CUDA_GQA_PADSIDE): the padded copies of the inputs Q, K, V on the side
# stream beside dA, dO's alone after dA. Count: the four-tensor pad launch takes 6.0 us at #7, ~11 at #0, 15.1 at #1
# (H200), three quarters of it the input copies; dA holds 128 of the 132 SMs (the copies get the other 4 while it runs,
# or run first if their grid is dispatched first: then ~the serial order, no loss). Prediction: #1 -5..-11 us, #0
# -4..-8, #7 -2..-4.5 (1.01-1.03x); the other workloads have no padding (the switch is an Error there).
# 1. Tests: the new PadSide test and the switch test; memcheck on the new test. 2. off / on at #0, #1, #7, three
# interleaved rounds. 3. Timeline of #1 with on; float64 PyTorch #1 and #7 with on.
# (Written again in the forty-second session with common.sh's helpers abrun, timeline, torch_check, sanitize and
# suite_e: the same steps; the printed summaries' lengths differ.)
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
shards 'CudaGqaRope.PadSide*:CudaGqaRope.MalformedSwitches*' 120
abrun gqa_rope_backward 0,1,7 3 padside 60 off=$P on=$P,ATTNBWD_CUDA_GQA_PADSIDE=on
timeline gqa_rope_backward 1 gqa-1-padside ATTNBWD_CUDA_GQA_PADSIDE=on
for w in 1 7; do torch_check 003 $w ATTNBWD_CUDA_GQA_PADSIDE=on; done
sanitize memcheck 'CudaGqaRope.PadSide*' padside 90
fin
