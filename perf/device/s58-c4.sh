# Fifty-eighth session, after call 3's ncu (thin at #13: tensor 55 %, DRAM 60 %, L2 70 %, nothing saturated; warps
# stall half their cycles on L1TEX scoreboards): ncu's full set on the thin kernel at #13 and #11 (stall reasons by
# warp state, source counters: which SASS lines the warps wait at), one cold call each through the CLI. Then on an
# H200 the four suites twice (issue figures), elsewhere nothing more.
source perf/device/common.sh
LIMIT=${LIMIT:-400}
P=$M/attnbwd_perf
full() {  # full WORKLOAD KERNEL_REGEX NAME
  ok || return 0
  "$M/attnbwd" gen gqa_rope_backward --workload "$1" -o "/tmp/gqa-$1.safetensors" > /dev/null 2>&1
  timeout "$(tmo 120)" ncu --set full --import-source no --print-details all --clock-control none \
    --kernel-name "regex:$2" --launch-count 1 "$M/attnbwd" run gqa_rope_backward -i "/tmp/gqa-$1.safetensors" \
    -o "/tmp/gqa-$1-out.safetensors" > "$R/ncu-full-$3.txt" 2>&1
  echo "ncu full $3 rc=$? t=$SECONDS"
  grep -iE "Duration|Stall|Shared Memory|Bank|Tensor|Warp Cycles" "$R/ncu-full-$3.txt" | head -30
}
full 13 linear_thin_kernel thin-13
full 11 linear_thin_kernel thin-11
case $GPU in
  *H200*) suites 2 ;;
esac
fin
