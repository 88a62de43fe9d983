# Fifty-first session, call 2: grad_o_weight early (beside dA) with the small-K kernel, now that split and sidedirect
# keep it out of the attention chain's graph: auto, sidedirect + smallk, and early + smallk under auto, split and
# sidedirect at gqa's small workloads; #11's timelines. Binaries: .carry (bundle of 57dc1a3).
source perf/device/common.sh
LIMIT=${LIMIT:-200}
L=$M/attnbwd_perf
P=$L
SK="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
E="ATTNBWD_CUDA_GQA_DWO=early"
abrun gqa_rope_backward 2,5,11,13 3 early 120 base="$L" sidedsk="$L,ATTNBWD_CUDA_GRAPHS=sidedirect,$SK" \
  autoesk="$L,$SK,$E" splitesk="$L,ATTNBWD_CUDA_GRAPHS=split,$SK,$E" \
  sidedesk="$L,ATTNBWD_CUDA_GRAPHS=sidedirect,$SK,$E"
timeline gqa_rope_backward 11 gqa-11-sidedesk ATTNBWD_CUDA_GRAPHS=sidedirect $SK $E
timeline gqa_rope_backward 11 gqa-11-autoesk $SK $E
fin
