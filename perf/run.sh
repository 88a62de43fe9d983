#!/usr/bin/env bash
# Runs the perf suite and keeps its JSON as <out-dir>/<gpu>-<date>-<commit>.json (gpu: "h200",
# "b200", ... from the GPU the suite measured, "cpu" on a host run), then draws the plot (.png,
# needs matplotlib) and prints the report (report.py; with --torch it joins the PyTorch baselines).
#
#   perf/run.sh [--bin PATH] [--out-dir DIR] [--torch TORCH.json] [--] [attnbwd_perf options...]
#
#   --bin      the suite (default: build/cuda/perf/attnbwd_perf, else build/host/perf/attnbwd_perf)
#   --out-dir  where results go (default: perf/results)
#   --torch    a torch_baselines.py JSON to join (x faster than PyTorch eager / best)
#   --with-torch  time the PyTorch baselines in the same run, right after the suite, on the same
#              GPU and workloads (needs python3 with torch), and join them
# Everything else goes to attnbwd_perf (e.g. --workloads=smallest --max-seconds=20).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="" out_dir="$root/perf/results" torch_json="" with_torch=0
suite_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out-dir) out_dir=$2; shift 2 ;;
    --torch) torch_json=$2; shift 2 ;;
    --with-torch) with_torch=1; shift ;;
    --) shift; suite_args+=("$@"); break ;;
    *) suite_args+=("$1"); shift ;;
  esac
done
if [ -z "$bin" ]; then
  for c in "$root/build/cuda/perf/attnbwd_perf" "$root/build/host/perf/attnbwd_perf"; do
    [ -x "$c" ] && { bin=$c; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "perf/run.sh: no attnbwd_perf (build first, or --bin)" >&2; exit 1; }

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo nogit)
[ -z "$(git -C "$root" status --porcelain 2>/dev/null)" ] || commit="$commit-dirty"
date=$(date -u +%F)
mkdir -p "$out_dir"
tmp="$out_dir/.run-$$.json"
trap 'rm -f "$tmp"' EXIT

export OMP_PROC_BIND=${OMP_PROC_BIND:-spread} OMP_PLACES=${OMP_PLACES:-threads}
"$bin" --benchmark_out="$tmp" --benchmark_out_format=json \
       --benchmark_context=commit="$commit" "${suite_args[@]}"

# Name the file after the GPU the suite itself reported ("NVIDIA H200" -> h200; none -> cpu).
gpu=$(sed -n 's/^ *"attnbwd_gpu": "\(.*\)",*$/\1/p' "$tmp" | head -n 1)
tag=$(printf '%s' "${gpu:-none}" | sed 's/^NVIDIA //I' | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9.-')
[ "$tag" = none ] && tag=cpu
json="$out_dir/$tag-$date-$commit.json"
[ -e "$json" ] && json="$out_dir/$tag-$date-$commit-$(date -u +%H%M%S).json"
mv "$tmp" "$json"
echo "results: $json"

# The summary above came from the suite itself; plot and report need python3 (report: stdlib only).
command -v python3 >/dev/null || { echo "plot and report skipped: no python3"; exit 0; }
if [ "$with_torch" = 1 ]; then
  # Same workloads and protocol as the suite; --workloads/--ops of the suite are passed along.
  torch_args_in=()
  for a in "${suite_args[@]}"; do
    case "$a" in --workloads=*|--ops=*|--iters=*|--warmup=*) torch_args_in+=("--${a#--}") ;; esac
  done
  torch_json="$out_dir/torch-$tag-$date-$commit.json"
  python3 "$root/perf/torch_baselines.py" "${torch_args_in[@]}" -o "$torch_json" \
    || { echo "torch baselines failed; report without them" >&2; torch_json=""; }
fi
torch_args=()
[ -n "$torch_json" ] && torch_args=(--torch "$torch_json")
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 "$root/perf/plot.py" "$json" "${torch_args[@]}"
else
  echo "plot skipped: python3 has no matplotlib (pip install matplotlib)"
fi
python3 "$root/perf/report.py" "$json" "${torch_args[@]}"
