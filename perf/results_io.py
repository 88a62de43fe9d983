"""Reading the perf suite's Google Benchmark JSON and torch_baselines.py's JSON (stdlib only).

A suite row is named "<op>/w<NN>/<backend>[/...]" with the label "uuid=<uuid> axes=<axes>
T_SOL_s=<seconds>"; its real_time is the median of the timed calls (perf/README.md). Skipped rows
carry error_message and no counters, so the model's T_SOL is also in the label.
"""
import json
import math

# Problem numbers of the ops, for short labels ("004 #8").
PROBLEM = {"out_proj_backward": "004", "gqa_rope_backward": "003",
           "vision_mha_norm_backward": "001", "vision_varlen_rope_backward": "017"}
UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_label(label):
    fields = {}
    for part in (label or "").split(" "):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = value
    return fields


def load_suite(path):
    """Returns (context, rows); one row per benchmark, skipped ones included."""
    with open(path) as f:
        doc = json.load(f)
    rows = []
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue  # aggregates, if someone ran with repetitions
        parts = b["name"].split("/")
        label = parse_label(b.get("label"))
        ran = not b.get("error_occurred", False)
        seconds = b["real_time"] * UNIT_SECONDS[b.get("time_unit", "ns")] if ran else None
        t_sol = float(label["T_SOL_s"]) if "T_SOL_s" in label else b.get("T_SOL_s")
        rows.append({
            "op": parts[0],
            "workload": int(parts[1].lstrip("w")),
            "backend": parts[2],
            "uuid": label.get("uuid"),
            "axes": label.get("axes", ""),
            "t_sol": t_sol,
            "seconds": seconds,
            "E": (t_sol / seconds) if ran and t_sol else None,
            "iters": int(b["iters"]) if ran and "iters" in b else 0,
            "error": b.get("error_message") if not ran else None,
            "raw": b,
        })
    return doc.get("context", {}), rows


def load_torch(path):
    """Returns (context, rows) of torch_baselines.py: one row per (op, workload, variant)."""
    with open(path) as f:
        doc = json.load(f)
    return doc.get("context", {}), doc.get("results", [])


def torch_times(torch_rows):
    """uuid -> {"eager": s, "best": s, "best_variant": name}; a best variant counts only if its
    check passed (or was not run)."""
    out = {}
    for r in torch_rows:
        if r.get("seconds") is None:
            continue
        entry = out.setdefault(r["uuid"], {})
        if r["variant"] == "eager":
            entry["eager"] = r["seconds"]
        elif r["variant"].startswith("best") and r.get("check", {}).get("passed", True):
            if "best" not in entry or r["seconds"] < entry["best"]:
                entry["best"], entry["best_variant"] = r["seconds"], r["variant"]
    return out


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def short(op, workload):
    return f"{PROBLEM.get(op, op)} #{workload}"
