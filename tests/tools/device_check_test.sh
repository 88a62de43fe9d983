#!/usr/bin/env bash
# cmake/device-check.sh against stub tools (no GPU needed; run by .ci/run): the step accounting, the
# racecheck rule (hazards with both ends in cuBLASLt's nvjet kernels are listed and pass; one end in a
# kernel of ours fails), --perf-variant's output files and its spec check, --ncu's three outputs
# (sections as text, SASS counters gzipped, the report) and --kernel-times' two. Exits non-zero on the first broken expectation.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/path" "$tmp/bin"

# Stubs on PATH: nvidia-smi, compute-sanitizer (racecheck output chosen by $STUB_RACE), ncu.
cat >"$tmp/path/nvidia-smi" <<'S'
#!/usr/bin/env bash
echo "Stub GPU, 0.0, 0 MHz"
S
cat >"$tmp/path/compute-sanitizer" <<'S'
#!/usr/bin/env bash
tool=""
while [ $# -gt 0 ]; do
  case $1 in
    --tool) tool=$2; shift 2 ;;
    --*) [ "$1" = --leak-check ] || [ "$1" = --error-exitcode ] || [ "$1" = --print-limit ] && shift; shift ;;
    *) break ;;
  esac
done
"$@"
rc=$?
if [ "$tool" = racecheck ]; then
  case ${STUB_RACE:-none} in
    vendor) echo "========= Error: Race reported between Read access at nvjet_sm90_stub+0xb00"
            echo "=========     and Write access at nvjet_sm90_stub+0x2ce0 [384 hazards]" ;;
    ours)   echo "========= Error: Race reported between Read access at attn_dq_wg+0x10"
            echo "=========     and Write access at nvjet_sm90_stub+0x20 [2 hazards]" ;;
  esac
fi
exit $rc
S
cat >"$tmp/path/ncu" <<'S'
#!/usr/bin/env bash
if [[ " $* " == *" --import "* ]]; then
  [[ " $* " == *" --page source "* ]] && echo '"Address","Source"' || echo "Section: Stub"
  exit 0
fi
prev=""
for a in "$@"; do [ "$prev" = --export ] && : >"$a.ncu-rep"; prev=$a; done
echo "==PROF== stub"
S
# Stub binaries: the tests pass, the perf suite writes its --benchmark_out, attnbwd gen/run succeed.
cat >"$tmp/bin/attnbwd_tests" <<'S'
#!/usr/bin/env bash
for a in "$@"; do case $a in --gtest_output=json:*) echo '{}' >"${a#--gtest_output=json:}" ;; esac; done
echo "[  PASSED  ] 1 test."
S
cat >"$tmp/bin/attnbwd_perf" <<'S'
#!/usr/bin/env bash
for a in "$@"; do case $a in --benchmark_out=*) echo "{\"env\": \"${STUB_VAR:-}\"}" >"${a#--benchmark_out=}" ;; esac; done
S
cat >"$tmp/bin/attnbwd" <<'S'
#!/usr/bin/env bash
[ "$1" = gen ] && : >"${@: -1}"
exit 0
S
chmod +x "$tmp"/path/* "$tmp"/bin/*
export PATH="$tmp/path:$PATH"

fail() { echo "device_check_test: $*" >&2; exit 1; }
run() {  # run OUT ARGS...: device-check with the stubs; prints its exit status
  local out=$1
  shift
  set +e
  bash "$root/cmake/device-check.sh" --bin "$tmp/bin" --out "$out" --skip initcheck-probe "$@" >"$out.log" 2>&1  # a later --skip replaces this one
  echo $?
  set -e
}
has() { grep -q -- "$2" "$1" || fail "expected '$2' in $1: $(cat "$1")"; }

# 1. Everything passes; vendor-only racecheck hazards do not fail; variant and ncu outputs exist.
rc=$(STUB_RACE=vendor run "$tmp/a" --perf-args '--backend=cuda --workloads=1' \
  --perf-variant 'out_proj_backward:STUB_VAR=x' --ncu 'gqa_rope_backward:5:attn' --kernel-times 'gqa_rope_backward:7')
[ "$rc" = 0 ] || fail "all-pass run exited $rc: $(cat "$tmp/a.log")"
for s in tests plain-gemm racecheck memcheck initcheck synccheck perf perf-variant-out_proj_backward-STUB_VAR \
  ncu-gqa_rope_backward-5 kernel-times-gqa_rope_backward-7; do has "$tmp/a/steps.txt" "^$s rc=0 "; done
has "$tmp/a/steps.txt" "^initcheck-probe skipped"
has "$tmp/a.log" "racecheck: 0 hazard ends in our kernels, 2 in cuBLASLt nvjet kernels, exit 0"
has "$tmp/a/perf-out_proj_backward-STUB_VAR-x.json" '"env": "x"'
[ -s "$tmp/a/perf.json" ] || fail "no perf.json"
has "$tmp/a/ncu-gqa_rope_backward-5.txt" "Section: Stub"
[ -e "$tmp/a/ncu-gqa_rope_backward-5.ncu-rep" ] || fail "no .ncu-rep"
zcat "$tmp/a/ncu-gqa_rope_backward-5-sass.csv.gz" | grep -q '"Address"' || fail "no SASS counters"
has "$tmp/a/kernels-gqa_rope_backward-7.csv" "==PROF== stub"
has "$tmp/a/kernels-gqa_rope_backward-7.txt" "no kernel rows"

# 2. A hazard with an end in a kernel of ours fails racecheck (and only it).
rc=$(STUB_RACE=ours run "$tmp/b" --skip initcheck-probe,perf)
[ "$rc" = 1 ] || fail "racecheck with our hazard: exit $rc, expected 1: $(cat "$tmp/b/steps.txt")"
has "$tmp/b/steps.txt" "^racecheck rc=1 "
has "$tmp/b/steps.txt" "^memcheck rc=0 "

# 3. A malformed --perf-variant is a counted failure, not a silent skip.
rc=$(run "$tmp/c" --skip initcheck-probe,tests,plain-gemm,racecheck,memcheck,initcheck,synccheck --perf-variant 'no-equals-sign')
[ "$rc" = 1 ] || fail "malformed --perf-variant: exit $rc, expected 1"
has "$tmp/c.log" "wants OP:VAR=VALUE"
echo "device_check_test: all expectations held"
