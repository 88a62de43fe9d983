# Fifty-fourth session, call 6: call 2 hung in mha #4 (B = 2, the fused launch by auto) on 89db8b6, and call 5 three
# times of five there (and not at FUSED=off, nor with 9dbc294's binary, three runs). Rounds of #4 alone under an 8 s
# cap: 89db8b6's binary (perf-new) and this bundle's (MCAST removed, the review's refactor kept); 9dbc294's left out
# (it fits no more in the 64 MiB the tool carries); then every mha test and the mha suite with this bundle.
source perf/device/common.sh
LIMIT=${LIMIT:-200}
declare -A hung=()
for i in 1 2 3 4 5; do
  for v in new nomcast; do
    case $v in new) b=$M/perf-new; e=() ;; nomcast) b=$M/attnbwd_perf; e=() ;; old) b=$M/perf-old; e=(ATTNBWD_CUDA_MHA_PTRIM=on) ;; esac
    ok || break
    timeout 8 env "${e[@]}" "$b" --backend=cuda --ops=vision_mha_norm_backward --workloads=4 > "$R/r$i-$v.log" 2>&1
    rc=$?; [ $rc = 0 ] || hung[$v]=$(( ${hung[$v]:-0} + 1 ))
    echo "round $i $v rc=$rc t=$SECONDS $(grep -o 'median [0-9.]* ms' "$R/r$i-$v.log" | head -1)"
  done
done
for v in new nomcast; do echo "$v: ${hung[$v]:-0} of 5 did not finish"; done
shards 'CudaVisionMhaNorm.*:CudaGraphs.VisionMha*' 60
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
P=$M/attnbwd_perf
ok && PB suite-vision_mha_norm_backward-1 "$P" vision_mha_norm_backward all; suite_e "$R"/suite-*.json
fin
