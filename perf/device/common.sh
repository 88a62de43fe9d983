# Sourced by the device-call scripts (perf/device/*.sh) on the GPU machine, from the repository root:
#   the binaries of .carry/bin-new.txz (perf/device/bundle.sh) unpacked once into /tmp/bh/bin-new ($M);
#   the workload files from .carry/solexec (the machine has no ../shared);
#   results under $OUT/r, packed by fin() into $OUT/r.tgz (the tool returns at most 8 files);
#   ok(): true while the call is within $LIMIT seconds (default 540), to stop before the tool's limit.
set -u
mkdir -p /tmp/bh
if [ -f .carry/bin-new.txz ] && [ ! -x /tmp/bh/bin-new/attnbwd_perf ]; then xz -dc .carry/bin-new.txz | tar xf - -C /tmp/bh; fi
M=/tmp/bh/bin-new
export ATTNBWD_SOLEXEC=$PWD/.carry/solexec
export LD_LIBRARY_PATH=$M/lib:${LD_LIBRARY_PATH:-}
R=$OUT/r
mkdir -p "$R"
LIMIT=${LIMIT:-540}
ok() { [ $SECONDS -lt $LIMIT ]; }
# PB name binary ops workloads [VAR=VALUE...]: one perf run into $R/name.json (+ .log)
PB() {
  local name=$1 bin=$2 ops=$3 wl=$4; shift 4
  env "$@" "$bin" --backend=cuda --ops="$ops" --workloads="$wl" --benchmark_out="$R/$name.json" \
    --benchmark_out_format=json > "$R/$name.log" 2>&1
  echo "PB $name rc=$? t=$SECONDS"
}
fin() { echo "fin t=$SECONDS"; cd "$OUT" && tar czf r.tgz r && rm -rf r; }
