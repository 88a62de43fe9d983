# Forty-second session, call 2 (bundle of ATTNBWD_CUDA_THIN_SUM): the thin launch's partials summed in the kernel by the
# slice's CTAs meeting on a counter (meet; meetcoop: a cooperative launch, without PDL after the merge pass), against
# the second launch (launch: its tail ~6 us after the main kernel at #13 on both GPUs, call 1's and the fortieth
# session's timelines). Count: each CTA sums a third of its slice (128 KB of partials at T = 256 from L2, ~1-1.5 us
# after the slice's last CTA): -4 to -5 us at #2 #5 #11 #13 (1.03-1.05x) for meet; meetcoop loses the PDL overlap
# with the merge pass (~1-2 us). 1. Tests. 2. launch / meet / meetcoop at #2 #5 #11 #13, three rounds. 3. Timeline #13
# meet; float64 PyTorch #13, #5 with meet. 4. memcheck and racecheck on out_proj's in-kernel-sum test (meet only).
# (Written again after the call with common.sh's helpers abrun, timeline, torch_check and sanitize: the same
# steps; the timelines now print their first 16 lines.)
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaGqaRope.Thin*:CudaOutProj.Thin*:CudaGqaRope.MalformedSwitches*:CudaGqaRope.QkvLaunchesAsProgrammatic*:CudaGraphs.Gqa*' 150
abrun gqa_rope_backward 2,5,11,13 3 thin-sum 170 launch=$P,ATTNBWD_CUDA_THIN_SUM=launch \
  meet=$P,ATTNBWD_CUDA_THIN_SUM=meet meetcoop=$P,ATTNBWD_CUDA_THIN_SUM=meetcoop
for v in meet meetcoop; do timeline gqa_rope_backward 13 gqa-13-$v ATTNBWD_CUDA_THIN_SUM=$v; done
for w in 13 5; do torch_check 003 $w ATTNBWD_CUDA_THIN_SUM=meet; done
for tool in memcheck racecheck; do sanitize $tool 'CudaOutProj.ThinPathMatches*' meet 100 ATTNBWD_CUDA_THIN_SUM=meet; done
fin
