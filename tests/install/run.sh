#!/usr/bin/env bash
# Install test: configure + build + install attnbwd into a temporary prefix, move the prefix somewhere
# else (the package config must be relocatable), build this folder's consumer against the moved tree
# with find_package(attnbwd), and run it and the installed CLI.
#
#   bash tests/install/run.sh [host|cuda]
#
# Kokkos (with Kokkos Kernels) from $Kokkos_ROOT, else the deps cache (cmake/deps/build-deps.sh <config>).
# host (default): the host compiler. cuda: a CUDA Kokkos and its nvcc_wrapper; the consumer and the CLI
#       run only when a GPU is there (otherwise they are built: find_package and linking still checked).
# ATTNBWD_INSTALL_TEST_DIR: work folder (default: a fresh temporary one, removed on success).
# ATTNBWD_INSTALL_TEST_CMAKE_ARGS: extra configure arguments for attnbwd (e.g. -DATTNBWD_ENABLE_CUDA=ON).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
config=${1:-host}
jobs=${ATTNBWD_JOBS:-$(nproc)}
log() { printf '\n== install test: %s\n' "$*"; }
fail() { printf 'install test FAILED: %s\n' "$*" >&2; exit 1; }

case "$config" in host|cuda) ;; *) sed -n '2,13p' "$0"; exit 2 ;; esac

# Kokkos (+ Kokkos Kernels, same prefix or on CMAKE_PREFIX_PATH).
if [ -n "${Kokkos_ROOT:-}" ]; then
  kokkos=$Kokkos_ROOT
else
  out=$(bash "$root/cmake/deps/build-deps.sh" "$config" | tee -a /dev/stderr)  # -a: a log file behind stderr is appended to, not truncated
  kokkos=$(sed -n "s/^ATTNBWD_KOKKOS_PREFIX_$config=//p" <<<"$out" | tail -n 1)
fi
[ -n "$kokkos" ] && [ -d "$kokkos" ] || fail "no Kokkos prefix for $config"
compiler=()
if [ "$config" = cuda ]; then
  wrapper="$kokkos/bin/nvcc_wrapper"
  [ -x "$wrapper" ] || wrapper=$(command -v nvcc_wrapper || true)
  [ -n "$wrapper" ] || fail "no nvcc_wrapper"
  compiler=("-DCMAKE_CXX_COMPILER=$wrapper")
fi

work=${ATTNBWD_INSTALL_TEST_DIR:-}
keep=1
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/attnbwd-install-test.XXXXXX")
  keep=0
fi
mkdir -p "$work"
build="$work/build" staged="$work/staged/prefix" moved="$work/moved/somewhere/else/attnbwd"
rm -rf "$staged" "$moved" "$work/consumer"

log "configure + build + install attnbwd ($config, Kokkos $kokkos) into $staged"
extra=()
read -r -a extra <<<"${ATTNBWD_INSTALL_TEST_CMAKE_ARGS:-}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$kokkos" -DCMAKE_INSTALL_PREFIX="$staged" "${compiler[@]}" \
      -DATTNBWD_ENABLE_TESTS=OFF -DATTNBWD_ENABLE_PERF=OFF -DATTNBWD_ENABLE_TOOLS=ON \
      "${extra[@]}" >"$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log"; fail "configure"; }
cmake --build "$build" -j "$jobs"
cmake --install "$build" >"$work/install.log"

log "relocate $staged -> $moved"
mkdir -p "$(dirname "$moved")"
mv "$staged" "$moved"
cfg=$(dirname "$(find "$moved" -name attnbwdConfig.cmake -print -quit)")
[ -f "$cfg/attnbwdConfig.cmake" ] && [ -f "$cfg/attnbwdConfigVersion.cmake" ] && [ -f "$cfg/attnbwdTargets.cmake" ] \
  || fail "attnbwdConfig.cmake, attnbwdConfigVersion.cmake or attnbwdTargets.cmake not installed"
[ -x "$moved/bin/attnbwd" ] || fail "the attnbwd CLI is not installed"
[ -f "$moved/include/attnbwd/attnbwd.hpp" ] && [ -f "$moved/include/attnbwd/version.hpp" ] \
  || fail "headers not installed"
# No build-time path may remain in the package config or the headers.
for p in "$staged" "$build" "$root"; do
  if grep -rIlF "$p" "$cfg" "$moved/include"; then fail "installed files above mention $p"; fi
done

log "consumer: find_package(attnbwd) from the moved prefix"
cmake -S "$root/tests/install" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$moved;$kokkos" "${compiler[@]}" >"$work/consumer.log" 2>&1 \
  || { cat "$work/consumer.log"; fail "consumer configure"; }
grep -F "attnbwd 0" "$work/consumer.log" || true
grep -qF "$moved" "$work/consumer/CMakeCache.txt" || fail "the consumer did not use the moved prefix"
cmake --build "$work/consumer" -j "$jobs"

if [ "$config" = cuda ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  log "consumer and CLI built, not run (no GPU)"
else
  log "run the consumer"
  OMP_PROC_BIND=false "$work/consumer/attnbwd_consumer" || fail "consumer"
  log "run the installed CLI (gen + run, serial backend)"
  cli="$moved/bin/attnbwd"
  OMP_PROC_BIND=false "$cli" gen out_proj_backward --axes batch_size=1,seq_len=4 --seed 3 \
      -o "$work/in.safetensors" || fail "attnbwd gen"
  OMP_PROC_BIND=false "$cli" run out_proj_backward -i "$work/in.safetensors" -o "$work/out.safetensors" \
      --backend serial || fail "attnbwd run"
  [ -s "$work/out.safetensors" ] || fail "attnbwd run wrote nothing"
fi

[ "$keep" = 1 ] || rm -rf "$work"
log "PASSED"
