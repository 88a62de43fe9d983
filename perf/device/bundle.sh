#!/usr/bin/env bash
# Packs what a device call needs beside the working tree into .carry/ (git-ignored; pass carry=[".carry"] to the
# device tool): the CUDA build's test, perf and CLI binaries with the shared libraries the GPU machine lacks
# (Google Benchmark, CUPTI 13) as .carry/bin-new.txz (xz: the carried paths and the tree must stay under 64 MiB),
# the commit they were built from as .carry/bin-new.commit, and the workload files as .carry/solexec.
#   bash perf/device/bundle.sh [--build DIR] [--extra NAME=PATH ...]
#     --build DIR        the CUDA build (default build/cuda)
#     --extra NAME=PATH  one more file into the bundle's folder, e.g. attnbwd-100a=/work/b100/cuda/attnbwd
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build/cuda
extras=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --extra)
      case $2 in *=?*) extras+=("$2") ;; *) echo "bundle: --extra takes NAME=PATH, not '$2'" >&2; exit 2 ;; esac
      shift 2 ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin-new/lib" "$root/.carry"
cp "$build/tests/attnbwd_tests" "$build/perf/attnbwd_perf" "$build/attnbwd" "$stage/bin-new/"
for lib in libbenchmark.so.1debian libcupti.so.13; do
  path=$(ldd "$build/perf/attnbwd_perf" | awk -v l="$lib" '$1 == l && $2 == "=>" && $3 ~ /^\// { print $3 }')
  [ -f "$path" ] || { echo "bundle: ldd finds no $lib for $build/perf/attnbwd_perf" >&2; exit 1; }
  cp -L "$path" "$stage/bin-new/lib/"
done
for e in "${extras[@]}"; do cp "${e#*=}" "$stage/bin-new/${e%%=*}"; done
(cd "$stage" && tar cf - bin-new | xz -T2 -3 > "$root/.carry/bin-new.txz")
git -C "$root" rev-parse --short HEAD > "$root/.carry/bin-new.commit"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no -- src backends include tests perf CMakeLists.txt cmake ':!perf/device' ':!*.md' ':!*.py')" ]; then
  echo "bundle: warning: the tree has uncommitted changes; bin-new.commit names HEAD, not what was built" >&2
fi
[ -z "$(cd "$build" && ninja -n 2>/dev/null | grep -v 'no work to do\|Re-checking\|Re-running')" ] ||
  echo "bundle: warning: $build is not up to date (ninja -n has work)" >&2
solexec=${ATTNBWD_SOLEXEC:-$root/../shared/solexec}
[ -d "$solexec" ] || { echo "bundle: no workload folder $solexec (ATTNBWD_SOLEXEC)" >&2; exit 1; }
[ -d "$root/.carry/solexec" ] && chmod -R u+w "$root/.carry/solexec"  # a copy of read-only files is read-only
rm -rf "$root/.carry/solexec" && cp -r "$solexec" "$root/.carry/solexec" && chmod -R u+w "$root/.carry/solexec"
du -sh "$root/.carry" | sed 's/^/bundle: /'
