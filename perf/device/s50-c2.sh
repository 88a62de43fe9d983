# Fiftieth session, call 2: where the small path's first attention kernel (dp_softmax) waits beside a side-branch
# kernel. Call 1 found every one of its CTAs ending within 96 ns of the others, ~20 µs after the start, when the
# 16 CTAs beside it spin 36 K cycles (alone: 8.5 µs, ends spread over ~930 ns). The probe build
# (perf/probes/graph_effect_probe5.patch) adds stamps at dp_softmax's first tile, the end of its sweep 1 and the end of
# its tile loop, spin modes of the small-K kernel with nothing before the spin (6) or only setmaxnreg (7), and the spin
# length (ATTNBWD_PROBE_SPIN cycles).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
Q=$M/attnbwd_perf_probe5
S="ATTNBWD_CUDA_GQA_DWO_GEMM=smallk ATTNBWD_CUDA_GQA_DWO_SMS=16"
stamps "$Q" auto
stamps "$Q" m3 $S ATTNBWD_PROBE_SMALLK_MODE=3
stamps "$Q" m3-long $S ATTNBWD_PROBE_SMALLK_MODE=3 ATTNBWD_PROBE_SPIN=72000
stamps "$Q" m3-short $S ATTNBWD_PROBE_SMALLK_MODE=3 ATTNBWD_PROBE_SPIN=9000
stamps "$Q" m6 $S ATTNBWD_PROBE_SMALLK_MODE=6
stamps "$Q" m7 $S ATTNBWD_PROBE_SMALLK_MODE=7
stamps "$Q" m6-nograph $S ATTNBWD_PROBE_SMALLK_MODE=6 ATTNBWD_CUDA_GRAPHS=0
stamps "$Q" m3-pdloff $S ATTNBWD_PROBE_SMALLK_MODE=3 ATTNBWD_CUDA_GQA_PDL=off ATTNBWD_CUDA_GQA_SMALL_PDL=off
python3 perf/scripts/stamps.py "$R"/stamps-*.txt
fin
