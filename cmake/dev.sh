#!/usr/bin/env bash
# attnbwd developer entry points (the README's two commands, and CI's).
#
#   bash cmake/dev.sh main        build everything (dependencies included) and run the main job
#   bash cmake/dev.sh test        build everything and run every test (ctest)
#   bash cmake/dev.sh build-cuda  build the CUDA configuration (compile + link, no run)
#   bash cmake/dev.sh build       build the host configuration only
#   bash cmake/dev.sh cxx20       build + test the host configuration as C++20, build the CUDA one as C++20
#
# Builds go to build/<config>. Dependencies (Kokkos, Kokkos Kernels) are built once into a cache
# (cmake/deps/build-deps.sh; ATTNBWD_DEPS_DIR overrides where), or taken from an installed Kokkos
# when Kokkos_ROOT / CMAKE_PREFIX_PATH points at one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${ATTNBWD_JOBS:-$(nproc)}
# OpenMP thread placement for the OpenMP backend (Kokkos warns when unset).
export OMP_PROC_BIND=${OMP_PROC_BIND:-spread} OMP_PLACES=${OMP_PLACES:-threads}

log() { printf '\n== %s\n' "$*"; }

# Has this machine a working NVIDIA GPU?
have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

deps_prefix() {  # $1 = host|cuda
  local out
  out=$(bash "$root/cmake/deps/build-deps.sh" "$1" | tee -a /dev/stderr)  # -a: a log file behind stderr is appended to, not truncated
  sed -n "s/^ATTNBWD_KOKKOS_PREFIX_$1=//p" <<<"$out" | tail -n 1
}

build_config() {  # $1 = host|cuda, $2 = the C++ standard (17, the default, or 20)
  local config=$1 std=${2:-17} prefix bdir
  log "dependencies ($config)"
  prefix=$(deps_prefix "$config")
  [ -n "$prefix" ] || { echo "no Kokkos prefix for $config" >&2; exit 1; }
  bdir="$root/build/$config"
  local extra=()
  if [ "$std" != 17 ]; then
    bdir="$root/build/$config-cxx$std"
    extra+=("-DCMAKE_CXX_STANDARD=$std")
  fi
  if [ "$config" = cuda ]; then
    # Kokkos 3.4 compiles CUDA code through its nvcc_wrapper as the C++ compiler.
    local wrapper="$prefix/bin/nvcc_wrapper"
    [ -x "$wrapper" ] || wrapper=$(command -v nvcc_wrapper || true)
    if [ "$std" = 20 ] && [ -n "$wrapper" ] && ! grep -q -- '-std=c++20)' "$wrapper"; then
      # Kokkos 3.4's nvcc_wrapper knows standards up to C++17 (it passes -std=c++20 to the host compiler
      # only, so nvcc's front end and g++ disagree). Kokkos 5 builds are C++20 through nvcc: check that
      # the library's Kokkos code compiles so, with a copy of the wrapper that takes -std=c++20 as it
      # takes -std=c++17.
      mkdir -p "$bdir"
      sed 's/^  --std=c++17|-std=c++17)$/  --std=c++17|-std=c++17|--std=c++20|-std=c++20)/' "$wrapper" \
        > "$bdir.nvcc_wrapper"
      chmod +x "$bdir.nvcc_wrapper"
      if grep -q -- '-std=c++20)' "$bdir.nvcc_wrapper"; then
        wrapper="$bdir.nvcc_wrapper"
      else  # another wrapper (a later Kokkos): used as it is
        echo "dev.sh: $wrapper has no C++17 case of Kokkos 3.4's form; used unchanged for C++20" >&2
      fi
    fi
    [ -n "$wrapper" ] && extra+=("-DCMAKE_CXX_COMPILER=$wrapper")
    extra+=("-DATTNBWD_ENABLE_CUDA=ON")
  fi
  log "configure + build ($config, C++$std) in $bdir"
  mkdir -p "$root/build"
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" "${extra[@]}" >"$bdir.configure.log" 2>&1 \
    || { tail -n 60 "$bdir.configure.log"; exit 1; }
  cmake --build "$bdir" -j "$jobs"
}

# The best local configuration: cuda on a GPU machine (when nvcc is there), else host.
best_config() {
  if have_gpu && command -v nvcc >/dev/null 2>&1; then echo cuda; else echo host; fi
}

run_main() {
  local config
  config=$(best_config)
  build_config "$config"
  # The perf suite (perf/README.md) on the best local backend, printing its summary; JSON, plot and
  # report land in build/<config>/perf-results. A host-only build times the smallest workload of
  # each op within 15 s per benchmark, so the CPU main job takes minutes; a GPU build runs all 64.
  local args=(--max-seconds=30)
  [ "$config" = host ] && args=(--workloads=smallest --max-seconds=15)
  log "main job: perf suite on the best local backend ($config build)"
  bash "$root/perf/run.sh" --bin "$root/build/$config/perf/attnbwd_perf" \
       --out-dir "$root/build/$config/perf-results" -- "${args[@]}"
}

run_tests() {
  build_config host
  log "tests (host: Serial + OpenMP)"
  OMP_PROC_BIND=false ctest --test-dir "$root/build/host" --output-on-failure -j "$jobs"
  if have_gpu && command -v nvcc >/dev/null 2>&1; then
    build_config cuda
    log "tests (cuda)"
    ctest --test-dir "$root/build/cuda" --output-on-failure
  fi
}

# C++20 (Kokkos 5 requires it): the host configuration built and tested, the CUDA one built.
run_cxx20() {
  build_config host 20
  log "tests (host, C++20)"
  OMP_PROC_BIND=false ctest --test-dir "$root/build/host-cxx20" --output-on-failure -j "$jobs"
  build_config cuda 20
}

case "${1:-}" in
  main) run_main ;;
  test) run_tests ;;
  build) build_config host ;;
  build-cuda) build_config cuda ;;
  cxx20) run_cxx20 ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
