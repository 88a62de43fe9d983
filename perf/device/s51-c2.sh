# Fifty-first session, call 2 (never ran: refused starts; split and sidedirect were removed after call 1; it needs
# perf/probes/graph_split_sidedirect.patch applied): the graph tests again (split's fix: the side stream captures
# throughout, so its work
# after a join is the call's; mha failed its replays under split and sidedirect in call 1), then grad_o_weight early
# (beside dA) with the small-K kernel: auto, sidedirect + smallk, and early + smallk under auto, split and sidedirect
# at gqa's small workloads; #11's timelines; mha's split / sidedirect A/B again (call 1's was invalid).
# Binaries: .carry (the bundle's commit in .carry/bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-220}
L=$M/attnbwd_perf
P=$L
shards 'CudaGraphs.*' 120
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
SK="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk"
E="ATTNBWD_CUDA_GQA_DWO=early"
abrun gqa_rope_backward 2,5,11,13 3 early 120 base="$L" sidedsk="$L,ATTNBWD_CUDA_GRAPHS=sidedirect,$SK" \
  autoesk="$L,$SK,$E" splitesk="$L,ATTNBWD_CUDA_GRAPHS=split,$SK,$E" \
  sidedesk="$L,ATTNBWD_CUDA_GRAPHS=sidedirect,$SK,$E"
timeline gqa_rope_backward 11 gqa-11-sidedesk ATTNBWD_CUDA_GRAPHS=sidedirect $SK $E
timeline gqa_rope_backward 11 gqa-11-autoesk $SK $E
abrun vision_mha_norm_backward 10,4,3 3 mha-split 40 base="$L" split="$L,ATTNBWD_CUDA_GRAPHS=split" \
  sided="$L,ATTNBWD_CUDA_GRAPHS=sidedirect"
fin
