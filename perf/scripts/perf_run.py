"""One attnbwd_perf run and its Google Benchmark JSON, and VAR=VALUE settings, for the scripts of this folder
(plan_sweep.py, ab.py)."""
import json
import os
import subprocess

_SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def parse_env(items, what):
    """VAR=VALUE strings -> {VAR: VALUE}; anything else is fatal (SystemExit: "`what` expects VAR=VALUE, got ...")."""
    env = {}
    for item in items:
        if "=" not in item or item.startswith("="):
            raise SystemExit(f"{what} expects VAR=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        env[k] = v
    return env


def run_perf(binary, op, workloads, env, out_path, timeout, prog):
    """Runs `binary --backend=cuda --ops=op --workloads=workloads` with `env` added to the environment.

    Returns ({workload: (µs, E or None)}, "") or (None, why) when the run failed, timed out or wrote no benchmark;
    an unknown time unit is fatal (SystemExit naming `prog`).
    """
    full_env = dict(os.environ)
    full_env.update(env)
    cmd = [binary, "--backend=cuda", f"--ops={op}", f"--workloads={workloads}", f"--benchmark_out={out_path}",
           "--benchmark_out_format=json"]
    try:
        done = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    except OSError as e:
        return None, str(e)
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"rc={done.returncode} {tail[0][:160]}"
    with open(out_path, encoding="utf-8") as f:
        data = json.load(f)
    res = {}
    for b in data.get("benchmarks", []):
        parts = b.get("name", "").split("/")
        if b.get("run_type", "iteration") != "iteration" or len(parts) < 2 or "real_time" not in b:
            continue
        unit = b.get("time_unit", "us")
        if unit not in _SCALE:
            raise SystemExit(f"{prog}: unknown time unit {unit!r}")
        res[parts[1]] = (b["real_time"] * _SCALE[unit], b.get("E"))
    if not res:
        return None, "no benchmarks in the output"
    return res, ""
