# Fifty-fourth session, call 2: call 1's mha suite hung at #4 (B = 2, the fused launch by auto) on 89db8b6 with every
# switch at auto; the suites of s53 (fc8397c) and PTRIM's A/B at #4 on 9dbc294 (H100) did not. Which change hangs:
# each run below is #4 (or #3) alone under a 25 s cap, the new bundle with one switch off at a time, then 9dbc294's
# binary (perf-old: PTRIM auto = off there) with and without PTRIM.
source perf/device/common.sh
LIMIT=${LIMIT:-300}
N=$M/attnbwd_perf
O=$M/perf-old
one() {  # one NAME BIN WL [VAR=val...]
  local name=$1 bin=$2 wl=$3; shift 3
  ok && timeout "$(tmo 25)" env "$@" "$bin" --backend=cuda --ops=vision_mha_norm_backward --workloads="$wl" \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? t=$SECONDS $(grep -o 'median [0-9.]* ms, E = [0-9.]*' "$R/$name.log" | head -1)"
}
one new-4 "$N" 4
one new-4-fusedoff "$N" 4 ATTNBWD_CUDA_MHA_FUSED=off
one new-4-ptrimoff "$N" 4 ATTNBWD_CUDA_MHA_PTRIM=off
one new-4-tailfull "$N" 4 ATTNBWD_CUDA_MHA_TAIL=full ATTNBWD_CUDA_MHA_PTRIM=off
one new-3 "$N" 3
one new-3-ptrimoff "$N" 3 ATTNBWD_CUDA_MHA_PTRIM=off
one old-4 "$O" 4
one old-4-ptrimon "$O" 4 ATTNBWD_CUDA_MHA_PTRIM=on
one old-3-ptrimon "$O" 3 ATTNBWD_CUDA_MHA_PTRIM=on
one new-4-again "$N" 4
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
fin
