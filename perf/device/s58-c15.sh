# Fifty-eighth session: gqa with KVDQ = ws by default (bundle a373fb0) — on an H200 first the gqa suite twice and the
# other three suites once (issue figures); on any card then float64 PyTorch over all 16 gqa workloads (cuda backend).
source perf/device/common.sh
LIMIT=${LIMIT:-330}
P=$M/attnbwd_perf
case $GPU in
  *H200*)
    for k in 1 2; do ok && PB "suite-gqa_rope_backward-$k" "$P" gqa_rope_backward all; done
    for op in out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward; do ok && PB "suite-$op-1" "$P" "$op" all; done
    suite_e "$R"/suite-*.json ;;
esac
ok && timeout "$(tmo 200)" python3 tests/torch/check_workloads.py --cli "$M/attnbwd" --ops gqa_rope_backward \
  --workloads all --backend cuda --solexec .carry/solexec --no-emulated --json "$R/torch-gqa.json" > "$R/torch-gqa.txt" 2>&1
echo "torch gqa rc=$? t=$SECONDS"; tail -20 "$R/torch-gqa.txt"
fin
