#!/usr/bin/env bash
# cmake/deps/build-deps.sh -- idempotent builder for attnbwd's Kokkos deps.
#
# Usage: bash cmake/deps/build-deps.sh [host|cuda] ...      (default: host)
#
# For every config named it ends up with an install prefix holding Kokkos
# 3.4.01 + Kokkos Kernels 3.4.01 (taken from Debian bookworm's `trilinos`
# 13.2.0-4 source package and patched with kokkos-3.4.01-cuda13.patch), then
# prints on stdout, after all configs are done, one line per config:
#
#     ATTNBWD_KOKKOS_PREFIX_<config>=<prefix>
#
# and writes <prefix> to $CACHE/current-<config>.prefix.  Progress and
# errors go to stderr; full build logs go to $CACHE/logs/.
#
# Environment:
#   ATTNBWD_DEPS_DIR           cache root (default: $HOME/.cache/attnbwd-deps)
#   ATTNBWD_USE_SYSTEM_KOKKOS  =1: use the Kokkos + KokkosKernels that CMake
#                              finds (Kokkos_ROOT / CMAKE_PREFIX_PATH / system
#                              paths) for every config; fail if none is found.
#   Kokkos_ROOT, CMAKE_PREFIX_PATH
#                              if either is set, a CMake probe looks for an
#                              existing Kokkos + KokkosKernels; one whose
#                              devices fit the config (CUDA for cuda, no CUDA
#                              for host) is used instead of building.
#   ATTNBWD_CUDA_ARCH          Kokkos arch for the cuda config (default
#                              HOPPER90; e.g. AMPERE80).  Part of the hash.
#   ATTNBWD_HOST_CXX           host C++ compiler (default: g++).
#   ATTNBWD_DEPS_JOBS          parallel build jobs (default: nproc).
#   ATTNBWD_DEPS_KEEP_BUILD=1  keep build trees under $CACHE/build.
set -Eeuo pipefail
trap 'printf "[build-deps] ERROR: command failed (exit %s) at line %s: %s\n" "$?" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------- constants
KOKKOS_VERSION=3.4.01
TRILINOS_SRC_PKG=trilinos
TRILINOS_DEB_VERSION=13.2.0-4
TRILINOS_ORIG=trilinos_13.2.0.orig.tar.gz
# sha256 of trilinos_13.2.0.orig.tar.gz; identical to the Checksums-Sha256
# entry of trilinos_13.2.0-4.dsc (cross-checked at run time as well).
TRILINOS_ORIG_SHA256=0ddb47784ba7b8a6b9a07a4822b33be508feb4ccd54301b2a5d10c9e54524b90
# Bump when the build recipe changes in a way the hashed inputs don't show.
RECIPE_REV=1
APT_PACKAGES=(dpkg-dev cmake ninja-build g++ libgtest-dev libbenchmark-dev
              patch ca-certificates)

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PATCH_FILE=$SCRIPT_DIR/kokkos-${KOKKOS_VERSION}-cuda13.patch
CACHE=${ATTNBWD_DEPS_DIR:-${HOME:?HOME is not set}/.cache/attnbwd-deps}
JOBS=${ATTNBWD_DEPS_JOBS:-$(nproc)}
CUDA_ARCH=${ATTNBWD_CUDA_ARCH:-HOPPER90}

# ---------------------------------------------------------------- helpers
log() { printf '[build-deps] %s\n' "$*" >&2; }
die() { printf '[build-deps] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -Eeuo/{/^set -Eeuo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
}

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  SUDO=()
fi

as_root() {
  if [[ $(id -u) -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
    die "need root for: $* (not root and no sudo available)"
  fi
  "${SUDO[@]}" "$@"
}

# run_logged <logfile> <description> <cmd...>: run with output to a log;
# on failure show the log's tail and abort.
run_logged() {
  local logf=$1 what=$2
  shift 2
  mkdir -p "$(dirname "$logf")"
  local t0=$SECONDS
  if ! "$@" >"$logf" 2>&1; then
    printf '[build-deps] ERROR: %s failed; last 60 lines of %s:\n' "$what" "$logf" >&2
    tail -n 60 "$logf" >&2 || true
    die "$what failed (full log: $logf)"
  fi
  log "  $what: ok ($((SECONDS - t0)) s)"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# ---------------------------------------------------------------- arguments
CONFIGS=()
for a in "$@"; do
  case $a in
    host | cuda) CONFIGS+=("$a") ;;
    -h | --help) usage; exit 0 ;;
    *) usage; die "unknown config '$a' (expected: host, cuda)" ;;
  esac
done
[[ ${#CONFIGS[@]} -gt 0 ]] || CONFIGS=(host)

mkdir -p "$CACHE"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/.lock"
  flock 9 || die "could not lock $CACHE/.lock"
fi

declare -A RESULT=()

emit_results() {
  local c tmp
  for c in "${CONFIGS[@]}"; do
    tmp=$(mktemp "$CACHE/.current-$c.XXXXXX")
    printf '%s\n' "${RESULT[$c]}" >"$tmp"
    mv -f "$tmp" "$CACHE/current-$c.prefix"
  done
  for c in "${CONFIGS[@]}"; do
    printf 'ATTNBWD_KOKKOS_PREFIX_%s=%s\n' "$c" "${RESULT[$c]}"
  done
}

# ---------------------------------------------------------------- 1. system Kokkos?
# Prints "<kokkos prefix>|<Kokkos_DEVICES>|<KokkosKernels_DIR>" on success.
probe_system_kokkos() {
  command -v cmake >/dev/null 2>&1 || return 1
  local d
  d=$(mktemp -d)
  cat >"$d/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(attnbwd_kokkos_probe LANGUAGES CXX)
set(CMAKE_CXX_EXTENSIONS OFF)
find_package(Kokkos CONFIG REQUIRED)
# Kokkos_ROOT alone does not reach KokkosKernels: also look next to Kokkos.
get_filename_component(_kokkos_prefix "${Kokkos_DIR}/../../.." ABSOLUTE)
find_package(KokkosKernels CONFIG REQUIRED HINTS "${_kokkos_prefix}")
file(WRITE "${CMAKE_BINARY_DIR}/probe.txt"
  "${Kokkos_DIR}|${Kokkos_DEVICES}|${KokkosKernels_DIR}")
EOF
  if cmake -S "$d" -B "$d/b" >"$d/log" 2>&1 && [[ -f $d/b/probe.txt ]]; then
    local out dir prefix
    out=$(cat "$d/b/probe.txt")
    dir=${out%%|*}
    prefix=${dir%/lib*/cmake/Kokkos}
    rm -rf "$d"
    printf '%s|%s\n' "$prefix" "${out#*|}"
    return 0
  fi
  if [[ ${ATTNBWD_USE_SYSTEM_KOKKOS:-0} == 1 ]]; then
    log "probe failed; last lines of its CMake output:"
    grep -v -e '^--' -e '^See also' "$d/log" | tail -n 15 >&2 || true
  fi
  rm -rf "$d"
  return 1
}

declare -A TODO=()
for c in "${CONFIGS[@]}"; do TODO[$c]=1; done

if [[ ${ATTNBWD_USE_SYSTEM_KOKKOS:-0} == 1 || -n ${Kokkos_ROOT:-} || -n ${CMAKE_PREFIX_PATH:-} ]]; then
  log "probing for an existing Kokkos + KokkosKernels (Kokkos_ROOT='${Kokkos_ROOT:-}' CMAKE_PREFIX_PATH='${CMAKE_PREFIX_PATH:-}')"
  if probe=$(probe_system_kokkos); then
    IFS='|' read -r sys_prefix sys_devices sys_kk_dir <<<"$probe"
    log "found Kokkos at $sys_prefix (devices: $sys_devices; KokkosKernels: $sys_kk_dir)"
    has_cuda=0
    [[ ";$sys_devices;" == *";CUDA;"* ]] && has_cuda=1
    for c in "${CONFIGS[@]}"; do
      fits=0
      if [[ $c == cuda && $has_cuda == 1 ]] || [[ $c == host && $has_cuda == 0 ]]; then fits=1; fi
      if [[ $fits == 1 || ${ATTNBWD_USE_SYSTEM_KOKKOS:-0} == 1 ]]; then
        [[ $fits == 1 ]] || log "WARNING: config '$c' forced onto system Kokkos with devices '$sys_devices'"
        RESULT[$c]=$sys_prefix
        unset 'TODO[$c]'
      else
        log "system Kokkos (devices: $sys_devices) does not fit config '$c'; building our own"
      fi
    done
  elif [[ ${ATTNBWD_USE_SYSTEM_KOKKOS:-0} == 1 ]]; then
    die "ATTNBWD_USE_SYSTEM_KOKKOS=1 but CMake finds no Kokkos + KokkosKernels (set Kokkos_ROOT or CMAKE_PREFIX_PATH)"
  else
    log "none found; building our own"
  fi
  if [[ ${#TODO[@]} -eq 0 ]]; then
    emit_results
    exit 0
  fi
fi

# ---------------------------------------------------------------- 2. Debian packages
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing missing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 ||
    die "apt-get update failed"
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
}

command -v dpkg >/dev/null 2>&1 || die "this script needs a Debian-based system (dpkg not found)"
ensure_packages "${APT_PACKAGES[@]}"

[[ -f $PATCH_FILE ]] || die "patch file not found: $PATCH_FILE"

HOST_CXX=$(command -v "${ATTNBWD_HOST_CXX:-g++}") ||
  die "host C++ compiler '${ATTNBWD_HOST_CXX:-g++}' not found"

NVCC=
find_nvcc() {
  [[ -n $NVCC ]] && return 0
  if command -v nvcc >/dev/null 2>&1; then
    NVCC=$(command -v nvcc)
  else
    local d
    for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
      if [[ -n $d && -x $d/bin/nvcc ]]; then NVCC=$d/bin/nvcc; break; fi
    done
  fi
  [[ -n $NVCC ]] || die "config 'cuda' needs nvcc (CUDA toolkit): not on PATH, not in \$CUDA_HOME or /usr/local/cuda"
  # nvcc_wrapper calls plain `nvcc`.
  local nvcc_dir
  nvcc_dir=$(dirname "$NVCC")
  export PATH="$nvcc_dir:$PATH"
}

# ---------------------------------------------------------------- 3. source
SRC_DIR=$CACHE/src
PRISTINE=$SRC_DIR/kokkos-${KOKKOS_VERSION}-from-trilinos-${TRILINOS_DEB_VERSION}

ensure_deb_src() {
  local f=/etc/apt/sources.list.d/attnbwd-deb-src.sources
  local main=/etc/apt/sources.list.d/debian.sources
  local uri=http://deb.debian.org/debian
  local key=/usr/share/keyrings/debian-archive-keyring.gpg
  if [[ -r $main ]]; then
    # Mirror the URIs / Signed-By of the stanza whose Suites list `bookworm`.
    local v
    v=$(awk 'BEGIN{RS="";FS="\n"}
             /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ {
               for(i=1;i<=NF;i++) if($i ~ /^URIs:/){sub(/^URIs:[ \t]*/,"",$i); split($i,u," "); print u[1]; exit}
             }' "$main")
    [[ -n $v ]] && uri=$v
    v=$(awk 'BEGIN{RS="";FS="\n"}
             /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ {
               for(i=1;i<=NF;i++) if($i ~ /^Signed-By:/){sub(/^Signed-By:[ \t]*/,"",$i); print $i; exit}
             }' "$main")
    [[ -n $v ]] && key=$v
  fi
  local want
  want=$(printf '%s\n' \
    "# Written by attnbwd cmake/deps/build-deps.sh: Debian sources for Kokkos (trilinos)." \
    "Types: deb-src" "URIs: $uri" "Suites: bookworm" "Components: main" "Signed-By: $key")
  if [[ ! -f $f || $(cat "$f") != "$want" ]]; then
    log "writing $f (deb-src bookworm main from $uri)"
    printf '%s\n' "$want" | as_root tee "$f" >/dev/null
    log "apt-get update (for the new deb-src entry)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
  fi
  if ! have_src_version; then
    log "source index lacks $TRILINOS_SRC_PKG $TRILINOS_DEB_VERSION; apt-get update"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
    have_src_version ||
      die "apt cannot see source package $TRILINOS_SRC_PKG=$TRILINOS_DEB_VERSION (check $f)"
  fi
}

have_src_version() {
  # (no `| grep -q` on a live pipe: with pipefail its SIGPIPE reads as failure)
  local out
  out=$(apt-cache showsrc "$TRILINOS_SRC_PKG" 2>/dev/null || true)
  grep -qx "Version: $TRILINOS_DEB_VERSION" <<<"$out"
}

dsc_sha256_of_orig() {
  # The .dsc's Checksums-Sha256 line for the orig tarball.
  awk -v f="$TRILINOS_ORIG" '
    /^Checksums-Sha256:/ {s=1; next}
    /^[^ ]/ {s=0}
    s && $3 == f {print $1; exit}' "$1"
}

fetch_source() {
  local tarball=$SRC_DIR/$TRILINOS_ORIG
  local dsc=$SRC_DIR/${TRILINOS_SRC_PKG}_${TRILINOS_DEB_VERSION}.dsc
  mkdir -p "$SRC_DIR"
  if [[ -f $SRC_DIR/.orig-verified && -f $tarball && -f $dsc ]] &&
    [[ $(cat "$SRC_DIR/.orig-verified") == "$TRILINOS_ORIG_SHA256 $(stat -c '%s %Y' "$tarball")" ]]; then
    log "source tarball already downloaded and verified"
  else
    ensure_deb_src
    log "downloading $TRILINOS_SRC_PKG=$TRILINOS_DEB_VERSION source (about 170 MB) into $SRC_DIR"
    local aptopt=()
    # root: skip apt's _apt sandbox (it cannot write into /root/...).
    [[ $(id -u) -eq 0 ]] && aptopt=(-o APT::Sandbox::User=root)
    rm -f "$SRC_DIR/.orig-verified"
    # shellcheck disable=SC2016  # $1/$@ expand in the inner bash
    run_logged "$CACHE/logs/apt-get-source.log" "apt-get source --download-only" \
      bash -c 'cd "$1" && shift && apt-get "$@"' _ "$SRC_DIR" "${aptopt[@]}" \
      source --download-only "$TRILINOS_SRC_PKG=$TRILINOS_DEB_VERSION"
    [[ -f $tarball ]] || die "apt-get source did not produce $tarball"
    local got dscsum
    got=$(sha256_of "$tarball")
    if [[ $got != "$TRILINOS_ORIG_SHA256" ]]; then
      die "sha256 mismatch for $tarball: got $got, expected $TRILINOS_ORIG_SHA256 (delete it and retry; if it persists the archive changed)"
    fi
    [[ -f $dsc ]] || die "apt-get source did not produce $dsc"
    dscsum=$(dsc_sha256_of_orig "$dsc")
    [[ $dscsum == "$TRILINOS_ORIG_SHA256" ]] ||
      die "$dsc lists sha256 '$dscsum' for $TRILINOS_ORIG, script expects $TRILINOS_ORIG_SHA256"
    echo "$TRILINOS_ORIG_SHA256 $(stat -c '%s %Y' "$tarball")" >"$SRC_DIR/.orig-verified"
    log "verified sha256 $TRILINOS_ORIG_SHA256 (matches hard-coded value and .dsc)"
  fi

  if [[ -f $PRISTINE/.extracted ]]; then
    return 0
  fi
  local top
  top=$(tar tzf "$tarball" 2>/dev/null | head -n1 || true)
  top=${top%%/*}
  [[ -n $top ]] || die "cannot list $tarball"
  log "extracting $top/packages/{kokkos,kokkos-kernels} from $TRILINOS_ORIG"
  local tmp=$SRC_DIR/.extract.$$
  rm -rf "$tmp" "$PRISTINE"
  mkdir -p "$tmp"
  tar xzf "$tarball" -C "$tmp" --no-same-owner \
    "$top/packages/kokkos" "$top/packages/kokkos-kernels" ||
    die "extracting kokkos / kokkos-kernels from $tarball failed"
  [[ -f $tmp/$top/packages/kokkos/CMakeLists.txt && -f $tmp/$top/packages/kokkos-kernels/CMakeLists.txt ]] ||
    die "unexpected tarball layout: no $top/packages/kokkos{,-kernels}/CMakeLists.txt"
  if ! grep -q "set(Kokkos_VERSION_PATCH 01)" "$tmp/$top/packages/kokkos/CMakeLists.txt" ||
    ! grep -q "set(Kokkos_VERSION_MINOR 4)" "$tmp/$top/packages/kokkos/CMakeLists.txt"; then
    die "the extracted Kokkos is not $KOKKOS_VERSION"
  fi
  mv "$tmp/$top/packages" "$PRISTINE"
  rm -rf "$tmp"
  touch "$PRISTINE/.extracted"
}

# ---------------------------------------------------------------- 4+5. build
# Options that do not depend on the prefix.  "@CXX@" is replaced at build
# time by the compiler path (for cuda: $prefix/bin/nvcc_wrapper).
COMMON_OPTS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17
             -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON
             -DBUILD_SHARED_LIBS=OFF -DCMAKE_CXX_COMPILER=@CXX@)
KK_COMMON_OPTS=(-DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
                -DKokkosKernels_ETI_ONLY=OFF -DKokkosKernels_ADD_DEFAULT_ETI=OFF
                -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF
                -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF
                -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF
                -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF
                -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF
                -DKokkosKernels_INST_EXECSPACE_SERIAL=OFF -DKokkosKernels_INST_MEMSPACE_HOSTSPACE=OFF
                -DKokkosKernels_ENABLE_TPL_BLAS=OFF -DKokkosKernels_ENABLE_TPL_LAPACK=OFF
                -DKokkosKernels_ENABLE_TPL_MKL=OFF -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF)

config_opts() {  # sets KOKKOS_OPTS / KK_OPTS for config $1
  case $1 in
    host)
      KOKKOS_OPTS=("${COMMON_OPTS[@]}" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON
                   -DKokkos_ENABLE_CUDA=OFF -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF)
      KK_OPTS=("${COMMON_OPTS[@]}" "${KK_COMMON_OPTS[@]}" -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF
               -DKokkosKernels_INST_EXECSPACE_OPENMP=OFF)
      ;;
    cuda)
      KOKKOS_OPTS=("${COMMON_OPTS[@]}" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=OFF
                   -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON "-DKokkos_ARCH_${CUDA_ARCH}=ON"
                   -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF)
      # Kokkos writes the cudart / libcuda paths that FindCUDAToolkit picked
      # into its installed config.  Where the toolkit has the conventional
      # <root>/lib64, pin them there: on a pip-style toolkit (lib64 -> lib,
      # like this dev machine) CMake would otherwise record <root>/lib/...,
      # which does not exist on a standard toolkit (the H200 machines), and
      # a prefix copied there would not link.
      local cr=${NVCC%/bin/nvcc}
      if [[ -e $cr/lib64/libcudart.so && -e $cr/lib64/stubs/libcuda.so ]]; then
        KOKKOS_OPTS+=("-DCUDAToolkit_ROOT=$cr" "-DCUDA_cudart_LIBRARY=$cr/lib64/libcudart.so"
                      "-DCUDA_cuda_driver_LIBRARY=$cr/lib64/stubs/libcuda.so")
      fi
      KK_OPTS=("${COMMON_OPTS[@]}" "${KK_COMMON_OPTS[@]}" -DKokkosKernels_ENABLE_TPL_CUBLAS=ON
               -DKokkosKernels_INST_EXECSPACE_CUDA=OFF -DKokkosKernels_INST_MEMSPACE_CUDASPACE=OFF
               -DKokkosKernels_INST_MEMSPACE_CUDAUVMSPACE=OFF)
      ;;
  esac
}

config_hash() {  # 8 hex digits over everything that defines the build
  local c=$1
  {
    echo "recipe $RECIPE_REV kokkos $KOKKOS_VERSION src $TRILINOS_SRC_PKG=$TRILINOS_DEB_VERSION $TRILINOS_ORIG_SHA256"
    echo "config $c"
    printf 'kokkos-opt %s\n' "${KOKKOS_OPTS[@]}"
    printf 'kk-opt %s\n' "${KK_OPTS[@]}"
    echo "patch $(sha256_of "$PATCH_FILE")"
    echo "host-cxx $HOST_CXX: $("$HOST_CXX" --version | sed -n 1p)"
    if [[ $c == cuda ]]; then
      echo "nvcc $NVCC: $("$NVCC" --version | tail -n2 | tr '\n' ' ')"
    fi
  } | sha256sum | cut -c1-8
}

build_config() {
  local c=$1 hash=$2
  local name=kokkos-${KOKKOS_VERSION}-$c-$hash
  local prefix=$CACHE/install/$name
  local build=$CACHE/build/$name
  local logs=$CACHE/logs/$name
  local cxx

  fetch_source

  log "[$c] building into $prefix (logs: $logs)"
  rm -rf "$prefix" "$build" "$logs"
  mkdir -p "$build" "$logs" "$prefix"

  # Fresh copy of the pristine sources, then the patch: idempotent.
  cp -a "$PRISTINE/." "$build/src"
  run_logged "$logs/patch.log" "[$c] patch -p1 < $(basename "$PATCH_FILE")" \
    patch -p1 --batch --forward --fuzz=0 --no-backup-if-mismatch \
    -d "$build/src" -i "$PATCH_FILE"

  if [[ $c == cuda ]]; then
    # Put the (patched) nvcc_wrapper into the prefix *before* building and
    # compile with that copy: Kokkos records CMAKE_CXX_COMPILER in its
    # installed config (Kokkos_CXX_COMPILER, used by kokkos_launch_compiler),
    # so it must point at a file that outlives the build tree.
    mkdir -p "$prefix/bin"
    install -m 0755 "$build/src/kokkos/bin/nvcc_wrapper" "$prefix/bin/nvcc_wrapper"
    cxx=$prefix/bin/nvcc_wrapper
    export NVCC_WRAPPER_DEFAULT_COMPILER=$HOST_CXX
  else
    cxx=$HOST_CXX
  fi
  local kopts=("${KOKKOS_OPTS[@]/@CXX@/$cxx}")
  local kkopts=("${KK_OPTS[@]/@CXX@/$cxx}")

  run_logged "$logs/kokkos-configure.log" "[$c] Kokkos configure" \
    cmake -S "$build/src/kokkos" -B "$build/kokkos" "${kopts[@]}" \
    -DCMAKE_INSTALL_PREFIX="$prefix"
  run_logged "$logs/kokkos-build.log" "[$c] Kokkos build (-j$JOBS)" \
    cmake --build "$build/kokkos" -j "$JOBS"
  run_logged "$logs/kokkos-install.log" "[$c] Kokkos install" \
    cmake --install "$build/kokkos"

  run_logged "$logs/kernels-configure.log" "[$c] Kokkos Kernels configure" \
    cmake -S "$build/src/kokkos-kernels" -B "$build/kernels" "${kkopts[@]}" \
    -DKokkos_ROOT="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix"
  run_logged "$logs/kernels-build.log" "[$c] Kokkos Kernels build (-j$JOBS)" \
    cmake --build "$build/kernels" -j "$JOBS"
  run_logged "$logs/kernels-install.log" "[$c] Kokkos Kernels install" \
    cmake --install "$build/kernels"

  [[ -f $prefix/lib/cmake/Kokkos/KokkosConfig.cmake || -f $prefix/lib64/cmake/Kokkos/KokkosConfig.cmake ]] ||
    die "[$c] install finished but KokkosConfig.cmake is missing under $prefix"
  [[ $c != cuda || -x $prefix/bin/nvcc_wrapper ]] || die "[$c] $prefix/bin/nvcc_wrapper missing"

  [[ ${ATTNBWD_DEPS_KEEP_BUILD:-0} == 1 ]] || rm -rf "$build"

  # Stamp last: its presence means the prefix is complete.
  {
    echo "config=$c hash=$hash kokkos=$KOKKOS_VERSION source=$TRILINOS_SRC_PKG=$TRILINOS_DEB_VERSION"
    echo "patch=$(basename "$PATCH_FILE") sha256=$(sha256_of "$PATCH_FILE")"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$prefix/.attnbwd-deps.stamp"
}

for c in "${CONFIGS[@]}"; do
  [[ -n ${TODO[$c]:-} ]] || continue
  [[ $c == cuda ]] && find_nvcc
  config_opts "$c"
  hash=$(config_hash "$c")
  prefix=$CACHE/install/kokkos-${KOKKOS_VERSION}-$c-$hash
  if [[ -f $prefix/.attnbwd-deps.stamp ]]; then
    log "[$c] up to date: $prefix"
  else
    t0=$SECONDS
    build_config "$c" "$hash"
    log "[$c] done in $((SECONDS - t0)) s: $prefix"
  fi
  RESULT[$c]=$prefix
done

emit_results
