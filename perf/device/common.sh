# Sourced by the device-call scripts (perf/device/*.sh) on the GPU machine, from the repository root:
#   the binaries of .carry/bin-new.txz (perf/device/bundle.sh) unpacked into /tmp/bh/bin-new ($M) unless that bundle is there already;
#   the workload files from .carry/solexec (the machine has no ../shared);
#   results under $OUT/r, packed by fin() into $OUT/r.tgz (the tool returns at most 8 files);
#   ok(): true while the call is within $LIMIT seconds (default 540); tmo N: a timeout cut to what is left.
set -u
M=/tmp/bh/bin-new
# Unpacked again whenever the bundle differs from the one unpacked last (a warm machine keeps /tmp between calls, and
# a session may rebundle between them): its checksum is the stamp.
stamp=$(md5sum .carry/bin-new.txz | cut -d' ' -f1)
if [ "$(cat /tmp/bh/stamp 2>/dev/null)" != "$stamp" ]; then
  rm -rf /tmp/bh && mkdir -p /tmp/bh
  xz -dc .carry/bin-new.txz | tar xf - -C /tmp/bh || { echo "common.sh: the bundle did not unpack" >&2; exit 1; }
  echo "$stamp" > /tmp/bh/stamp
fi
echo "bundle of $(cat .carry/bin-new.commit 2>/dev/null || echo '?'), md5 $stamp"
# The GPU's name (GPU), for scripts that run a step on one kind only: case $GPU in *H200*) ... esac
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: $GPU"
export ATTNBWD_SOLEXEC=$PWD/.carry/solexec
export LD_LIBRARY_PATH=$M/lib:${LD_LIBRARY_PATH:-}
R=$OUT/r
mkdir -p "$R"
LIMIT=${LIMIT:-540}
ok() { [ $SECONDS -lt $LIMIT ]; }
# tmo N: a timeout of N seconds cut to what is left before $LIMIT (at least 1), so that a step that starts in time
# also ends in time and fin() runs before the tool's own limit: timeout $(tmo 150) cmd ...
tmo() { local t=$1 left=$((LIMIT - SECONDS)); [ "$left" -lt "$t" ] && t=$left; [ "$t" -lt 1 ] && t=1; echo "$t"; }
# PB name binary ops workloads [VAR=VALUE...]: one perf run into $R/name.json (+ .log)
PB() {
  local name=$1 bin=$2 ops=$3 wl=$4; shift 4
  timeout "$(tmo 300)" env "$@" "$bin" --backend=cuda --ops="$ops" --workloads="$wl" --benchmark_out="$R/$name.json" \
    --benchmark_out_format=json > "$R/$name.log" 2>&1
  echo "PB $name rc=$? t=$SECONDS"
}
# shards FILTER SECONDS: the test binary ($M/attnbwd_tests) on FILTER in three concurrent gtest shards into
# $R/tests-{0,1,2}.txt (each cut at SECONDS, or what is left), then the PASSED/FAILED lines of all three
shards() {
  local i
  for i in 0 1 2; do
    GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout "$(tmo "$2")" "$M/attnbwd_tests" --gtest_filter="$1" \
      > "$R/tests-$i.txt" 2>&1 &
  done
  wait
  echo "tests t=$SECONDS"; grep -hE '^\[ +(PASSED|FAILED) +\]|FAILED  \]' "$R"/tests-*.txt
}
# all_tests: every CUDA test ('Cuda*:*Cuda*') in three shards of up to 240 s, then the first failures' context.
all_tests() {
  shards 'Cuda*:*Cuda*' 240
  grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
}
# suites_or OP: on an H200 the four suites twice (the issue figures); elsewhere OP's suite once, and its geomean E.
suites_or() {
  case $GPU in
    *H200*) suites 2 ;;
    *) suites 1 "$1" ;;
  esac
}
# soak OP WORKLOAD N: N perf runs of $P on one workload, each under an 8 s cap (a hang shows as a run cut there), logs
# in $R/soak-OP-WORKLOAD-i.log; then how many did not finish. Stops early once past $LIMIT (the count says how many ran).
soak() {
  local op=$1 wl=$2 runs=$3 i n=0 ran=0
  for ((i = 1; i <= runs; ++i)); do
    ok || break
    ran=$((ran + 1))
    timeout 8 "$P" --backend=cuda --ops="$op" --workloads="$wl" > "$R/soak-$op-$wl-$i.log" 2>&1 || n=$((n + 1))
  done
  echo "soak $op #$wl: $n of $ran runs did not finish t=$SECONDS"
}
# suite_e JSON...: for each suite JSON that exists, one line: its name, workload count, geomean E and the smallest E
suite_e() {
  local f
  for f in "$@"; do
    [ -f "$f" ] || continue
    python3 -c 'import json, math, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
e = [x["E"] for x in b if "E" in x]
print(sys.argv[1].split("/")[-1], len(e), "workloads, geomean E", round(math.exp(sum(map(math.log, e)) / len(e)), 4), "min", round(min(e), 3))' "$f" 2>&1 | tail -1
  done
}
# suites N [OP...]: the ops' suites on $P (default the four, gqa first), N runs each into $R/suite-OP-K.json, then
# suite_e over every suite of the call
suites() {
  local n=$1 op k
  shift
  [ $# -gt 0 ] || set -- gqa_rope_backward out_proj_backward vision_mha_norm_backward vision_varlen_rope_backward
  for op in "$@"; do
    for ((k = 1; k <= n; ++k)); do ok && PB "suite-$op-$k" "$P" "$op" all; done
  done
  suite_e "$R"/suite-*.json
}
# abrun OP WORKLOADS ROUNDS NAME SECONDS VARIANT...: perf/scripts/ab.py's interleaved rounds of the variants (each
# name=binary[,VAR=value...]) into $R/ab-NAME.json (+ .txt), then its summary lines; skipped once past $LIMIT.
abrun() {
  local op=$1 wl=$2 rounds=$3 name=$4 secs=$5 v args=()
  shift 5
  for v in "$@"; do args+=(--variant "$v"); done
  ok && timeout "$(tmo "$secs")" python3 perf/scripts/ab.py --op "$op" --workloads "$wl" --rounds "$rounds" "${args[@]}" \
    --out "$R/ab-$name.json" > "$R/ab-$name.txt" 2>&1
  echo "ab $name rc=$? t=$SECONDS"; tail -10 "$R/ab-$name.txt"
}
# timeline OP WORKLOAD NAME [VAR=value...]: one perf run of $P with ATTNBWD_PERF_TIMELINE into $R/tl/NAME.txt, printed
# by perf/scripts/timeline.py into $R/tl/NAME-print.txt, whose kernel lines are shown (the first 16).
timeline() {
  local op=$1 wl=$2 name=$3
  shift 3
  mkdir -p "$R/tl"
  ok && env "$@" ATTNBWD_PERF_TIMELINE="$R/tl/$name.txt" timeout "$(tmo 30)" "$P" --backend=cuda --ops="$op" \
    --workloads="$wl" > "$R/tl/$name.log" 2>&1
  python3 perf/scripts/timeline.py "$R/tl/$name.txt" > "$R/tl/$name-print.txt" 2>&1
  head -16 "$R/tl/$name-print.txt"
}
# torch_all OP NAME: tests/torch/check_workloads.py (float64 PyTorch) over all of OP's workloads on the bundle's CLI into
# $R/torch-NAME.json (+ .txt), then its verdict lines.
torch_all() {
  ok && timeout "$(tmo 200)" python3 tests/torch/check_workloads.py --cli "$M/attnbwd" --ops "$1" --workloads all \
    --backend cuda --solexec .carry/solexec --no-emulated --json "$R/torch-$2.json" > "$R/torch-$2.txt" 2>&1
  echo "torch $2 rc=$? t=$SECONDS"; tail -2 "$R/torch-$2.txt"
}
# san_matrix OP: cmake/device-check.sh's sanitizer matrix over OP's workloads (memcheck and synccheck on all, racecheck
# and initcheck on the smallest) into $R/dc, then how many passed and the failures.
san_matrix() {
  ok && ATTNBWD_SANITIZE_VENDOR=auto timeout "$(tmo 200)" bash cmake/device-check.sh --bin "$M" --out "$R/dc" \
    --sanitize-workloads "$1" \
    --skip tests,concurrency-soak,initcheck-probe,plain-gemm,memcheck,racecheck,initcheck,synccheck,torch,perf \
    > "$R/device-check.log" 2>&1
  echo "device-check rc=$? t=$SECONDS"
  grep -cE "^ok" "$R/dc/sanitize-workloads.txt" 2>/dev/null; grep -E "^FAIL" "$R/dc/sanitize-workloads.txt" | cut -c1-100
}
# stage_split OP WORKLOADS NAME: one perf run of $P under ATTNBWD_CUDA_STAGES=1 (stages serialised on the caller's
# stream), its stage lines into $R/stages-NAME-raw.txt, perf/scripts/stage_split.py's medians into $R/stages-NAME.txt.
stage_split() {
  ok && ATTNBWD_CUDA_STAGES=1 timeout "$(tmo 90)" "$P" --backend=cuda --ops="$1" --workloads="$2" \
    > "$R/stages-$3.log" 2> "$R/stages-$3-raw.txt"
  echo "stages $3 rc=$? t=$SECONDS"
  python3 perf/scripts/stage_split.py "$R/stages-$3-raw.txt" > "$R/stages-$3.txt" 2>&1; cut -c1-160 "$R/stages-$3.txt"
}
# gqa_checks: issue 6's checks after its figure, on the bundle: gqa's 16 workloads against the oracle (the gtest),
# float64 PyTorch over them, the sanitizer matrix and the stage split (s61-c1.sh, s61-c8.sh).
gqa_checks() {
  ok && timeout "$(tmo 150)" "$M/attnbwd_tests" --gtest_filter='CudaGqaRope.RealWorkloadsMatchTheOracle' \
    > "$R/tests-gqa-workloads.txt" 2>&1
  echo "workload test rc=$? t=$SECONDS"; grep -E "^\[ +(PASSED|FAILED)|Failure" -A6 "$R/tests-gqa-workloads.txt" | head
  torch_all gqa_rope_backward gqa
  san_matrix gqa_rope_backward
  stage_split gqa_rope_backward all gqa
}
# torch_check OPS WORKLOAD [VAR=value...]: tests/torch/check_workloads.py (float64 PyTorch) on the CLI of the bundle, one
# workload, into $R/torch-WORKLOAD.txt, then its verdict line.
torch_check() {
  local ops=$1 wl=$2
  shift 2
  ok && env "$@" timeout "$(tmo 50)" python3 tests/torch/check_workloads.py --cli "$M/attnbwd" --ops "$ops" \
    --workloads "$wl" --backend cuda --solexec .carry/solexec --no-emulated > "$R/torch-$wl.txt" 2>&1
  echo "torch $wl rc=$? t=$SECONDS"; tail -1 "$R/torch-$wl.txt"
}
# sanitize TOOL FILTER NAME SECONDS [VAR=value...]: compute-sanitizer --tool TOOL on the tests of FILTER into
# $R/TOOL-NAME.txt, then its summary lines.
sanitize() {
  local tool=$1 filter=$2 name=$3 secs=$4
  shift 4
  # SAN_ARGS: more compute-sanitizer options (e.g. --print-limit 20). To leave cuBLASLt's kernels out of racecheck pass
  # ATTNBWD_CUDA_SANITIZE_GEMM=plain as a VAR=value instead: --kernel-name-exclude kns=nvjet crashes racecheck under
  # CUDA 13 ("Internal Sanitizer Error"; README.md, forty-eighth session's call 5).
  # shellcheck disable=SC2086
  ok && env "$@" timeout "$(tmo "$secs")" compute-sanitizer --tool "$tool" --error-exitcode 9 ${SAN_ARGS:-} "$M/attnbwd_tests" \
    --gtest_filter="$filter" > "$R/$tool-$name.txt" 2>&1
  echo "$tool $name rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/$tool-$name.txt" | tail -3
}
# race_cli OP WORKLOAD SECONDS [VAR=value...]: racecheck on one workload of OP through the CLI ($M/attnbwd: gen, then
# run), the library's GEMMs on the plain kernel (ATTNBWD_CUDA_SANITIZE_GEMM=plain: racecheck cannot leave cuBLASLt's
# nvjet kernels out, above), into $R/racecheck-OP-WORKLOAD.txt; then its summary and the kernels of any report.
race_cli() {
  local op=$1 wl=$2 secs=$3
  shift 3
  ok || return 0
  "$M/attnbwd" gen "$op" --workload "$wl" -o "/tmp/$op-$wl.safetensors" > /dev/null 2>&1
  env ATTNBWD_CUDA_SANITIZE_GEMM=plain "$@" timeout "$(tmo "$secs")" compute-sanitizer --tool racecheck \
    --print-limit 200 "$M/attnbwd" run "$op" -i "/tmp/$op-$wl.safetensors" -o "/tmp/$op-$wl-out.safetensors" \
    > "$R/racecheck-$op-$wl.txt" 2>&1
  echo "racecheck $op #$wl rc=$? t=$SECONDS"
  grep -E "RACECHECK SUMMARY|Race reported" "$R/racecheck-$op-$wl.txt" | sed 's/+0x[0-9a-f]*//' | sort | uniq -c |
    head -8
}
# stamps BINARY NAME [VAR=value...]: one perf run of a probe build (perf/probes/graph_effect_probe*.patch) at gqa
# #11: its dp_softmax stamp lines into $R/stamps-NAME.txt, its stderr (the graph dump, if asked for) into
# $R/stderr-NAME.txt; perf/scripts/stamps.py summarises them.
stamps() {
  local bin=$1 name=$2
  shift 2
  ok && env "$@" timeout "$(tmo 60)" "$bin" --backend=cuda --ops=gqa_rope_backward --workloads=11 \
    > "$R/stamps-$name.txt" 2> "$R/stderr-$name.txt"
  echo "$name rc=$?"
}
fin() { echo "fin t=$SECONDS"; cd "$OUT" && tar czf r.tgz r && rm -rf r; }
