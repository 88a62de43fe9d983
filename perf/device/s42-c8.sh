# Forty-second session, call 8 (bundle of ATTNBWD_CUDA_THIN_TAIL): call 1's stream-K order lost 0.86-0.91x because its
# CTAs left the ranges' lockstep over W's rows. on keeps 120 CTAs in lockstep with ranges of 30 k-blocks and gives the
# last 6 k-blocks of every slice (240 units) to the 12 SMs the ranges leave (20 units each, up to 5 pieces: X reloads and
# a partial per piece; 5 partials per slice for the second launch). Count: the longest CTA 30 k-blocks against 32
# (−6 % of the launch at MB = 4: −3 to −4 µs at #13 and #2 after ~+1 µs of extra partial traffic); at MB ≤ 3 (#5, #11;
# DRAM-bound) ~1.00. Prediction: #13, #2 1.01-1.03x, #5, #11 0.99-1.01x. The default (off) now runs the kernel's
# piece loop too (one piece per CTA). 1. Tests (the tail tests and every thin test with off). 2. off / on at #2 #5 #11
# #13, two rounds. 3. float64 PyTorch #13 with on; timeline #13 on.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
P=$M/attnbwd_perf
shards 'CudaGqaRope.ThinQkv*:CudaOutProj.Thin*:CudaGqaRope.MalformedSwitches*' 90
abrun gqa_rope_backward 2,5,11,13 2 thin-tail 80 off=$P,ATTNBWD_CUDA_THIN_TAIL=off on=$P,ATTNBWD_CUDA_THIN_TAIL=on
torch_check 003 13 ATTNBWD_CUDA_THIN_TAIL=on
timeline gqa_rope_backward 13 gqa-13-tail ATTNBWD_CUDA_THIN_TAIL=on
fin
