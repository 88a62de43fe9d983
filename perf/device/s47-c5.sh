# Forty-seventh session, call 5 (an H200 if lent): issue figures with DKDV auto = batch, its A/B against apart on this
# card, float64 PyTorch at the three padded workloads.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
abrun gqa_rope_backward 0,1,7 3 gqa-dkdv-auto 70 auto=$P apart=$P,ATTNBWD_CUDA_GQA_DKDV=apart
for wl in 0 7; do ok && torch_check gqa_rope_backward $wl; done
ok && PB suite-gqa_rope_backward-3 $P gqa_rope_backward all
suites 2
fin
