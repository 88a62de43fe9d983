#!/usr/bin/env bash
# Host sanitizer job (CI runs it): the GoogleTest suite built with AddressSanitizer + UndefinedBehavior-
# Sanitizer and run with zero findings allowed (any report aborts its test, and so fails the job).
#
#   bash cmake/sanitize.sh            configure + build build/asan (tests only), run ctest
#
# Our code (library, tools, tests, and the Kokkos / Kokkos Kernels templates they instantiate) is built
# with -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined;
# the prebuilt Kokkos libraries from the deps cache are not instrumented (their heap blocks still are).
#
# Excluded from this run, and only from it (`dev.sh test` runs them): the ten oracle checks on real
# benchmark shapes that take 30-230 s each here (3-16 s at -O2; together ~10 min on two cores, last
# run clean): GqaRopeBackward.WorkloadShapeSpotCheck,
# VisionVarlenRopeBackwardSerial.WorkloadShapeMatchesDirectFormulas and the portable
# MatchesOracleOnWorkload<N> / Workload<N> cases on both host spaces. They run the same kernels and
# loops as the small-shape tests of the same ops, only with longer trip counts.
# ATTNBWD_SANITIZE_DIR overrides the build folder; ATTNBWD_SANITIZE_ALL=1 runs those tests too.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${ATTNBWD_JOBS:-$(nproc)}
bdir=${ATTNBWD_SANITIZE_DIR:-$root/build/asan}
log() { printf '\n== %s\n' "$*"; }

if [ -n "${Kokkos_ROOT:-}" ]; then
  prefix=$Kokkos_ROOT
else
  out=$(bash "$root/cmake/deps/build-deps.sh" host | tee -a /dev/stderr)  # -a: a log file behind stderr is appended to, not truncated
  prefix=$(sed -n 's/^ATTNBWD_KOKKOS_PREFIX_host=//p' <<<"$out" | tail -n 1)
fi
[ -n "$prefix" ] || { echo "no Kokkos prefix for the host configuration" >&2; exit 1; }

flags="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
log "configure + build (ASan + UBSan, -O1) in $bdir"
mkdir -p "$(dirname "$bdir")"
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
      -DCMAKE_CXX_FLAGS_SANITIZE="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="-fsanitize=address,undefined" \
      -DCMAKE_PREFIX_PATH="$prefix" -DATTNBWD_ENABLE_PERF=OFF -DATTNBWD_ENABLE_TOOLS=OFF \
      >"$bdir.configure.log" 2>&1 || { tail -n 60 "$bdir.configure.log"; exit 1; }
cmake --build "$bdir" --target attnbwd_tests -j "$jobs"

# ctest names typed tests Suite.Test<Type>.
heavy='GqaRopeBackward\.WorkloadShapeSpotCheck|VisionVarlenRopeBackwardSerial\.WorkloadShapeMatchesDirectFormulas'
heavy+='|\.Workload[0-9]+(<.*>)?$|MatchesOracleOnWorkload[0-9]+(<.*>)?$'
exclude=()
[ "${ATTNBWD_SANITIZE_ALL:-0}" = 1 ] || exclude=(-E "$heavy")
log "tests under ASan + UBSan"
# Leak checking on; any UBSan report is fatal (-fno-sanitize-recover) and printed with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# (tests/CMakeLists.txt sets OMP_PROC_BIND=false and OMP_WAIT_POLICY=passive for every test)
ctest --test-dir "$bdir" --output-on-failure -j "$jobs" "${exclude[@]}"
