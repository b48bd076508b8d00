#!/usr/bin/env python3
"""gpufill's CPU per thread against its loop tick and launch period, and under churn.

For each (tick_ms, period_ms) runs `gpufill run --gpus 0 --target 50` for 3 s of warm-up
plus `--hold` s, and reports CPU % of a core per thread over the hold (from
/proc/PID/task/*/stat), and the mean absolute error of NVML's utilization (polled every
100 ms) against 50. Then the default settings once more while short CUDA processes start
at 3 a second (scripts/churn.py's children) with `--grace 0.2`, as in churn.py, to see
which thread pays for churn.

    python3 scripts/cpu_sweep.py carry/gpufill [--hold 8] [--configs 10/20,25/50] [--no-churn]

Prints a table; writes $OUT/cpu_sweep.json.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import pynvml as N

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_diag import threads  # noqa: E402  (gpu_diag runs nothing on import)
from robust_lib import Gpufill, mae  # noqa: E402
import churn  # noqa: E402

CONFIGS = [(10, 20), (20, 20), (25, 25), (25, 50), (50, 50)]


def group(per_thread):
    """CPU seconds by thread name (gpufill names its threads; the driver's are cuda-*)."""
    out = {}
    for key, secs in per_thread.items():
        name = key.rsplit("/", 1)[0]
        out[name] = out.get(name, 0.0) + secs
    return out


def measure(exe, h, tick, period, hold, during=None, extra=()):
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(f"tick_ms = {tick}\n[load]\nperiod_ms = {period}\n")
    cfg.close()
    g = Gpufill(exe, ["--gpus", "0", "--target", "50", "--config", cfg.name, *extra])
    g.wait_for("filling", 30)
    time.sleep(3)
    a, ta = threads(g.pid), time.time()
    util = []
    worker = threading.Thread(target=during, daemon=True) if during else None
    if worker:
        worker.start()
    while time.time() - ta < hold:
        util.append(N.nvmlDeviceGetUtilizationRates(h).gpu)
        time.sleep(0.1)
    b, tb = threads(g.pid), time.time()
    if worker:
        worker.join(timeout=60)
    g.proc.terminate()
    g.proc.wait(timeout=10)
    os.unlink(cfg.name)
    wall = tb - ta
    per = {k: 100 * (b[k] - a.get(k, 0.0)) / wall for k in b}
    grouped = group(per)
    return {
        "tick_ms": tick, "period_ms": period, "churn": bool(during),
        "cpu_total_pct": sum(per.values()),
        "cpu_by_thread_pct": dict(sorted(grouped.items(), key=lambda kv: -kv[1])),
        "mae_nvml_util": mae(util, 50) if not during else None,
        "yield_lines": g.count("yielding"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill")
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--configs", default=",".join(f"{t}/{p}" for t, p in CONFIGS),
                    help="tick_ms/period_ms pairs, comma-separated")
    ap.add_argument("--no-churn", action="store_true")
    args = ap.parse_args()
    configs = [tuple(int(x) for x in c.split("/")) for c in args.configs.split(",")]
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    rows = [measure(args.gpufill, h, t, p, args.hold) for t, p in configs]
    env = dict(os.environ)

    def children():
        churn.churn(args.hold, 3, env, 1, 3)

    if not args.no_churn:
        rows.append(measure(args.gpufill, h, 10, 20, args.hold, during=children,
                            extra=["--grace", "0.2"]))
    print(f"{'tick':>5}{'period':>7}{'churn':>6}{'cpu%':>7}{'mae':>6}  threads (% of a core)")
    for r in rows:
        m = "-" if r["mae_nvml_util"] is None else f"{r['mae_nvml_util']:.2f}"
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(r["cpu_by_thread_pct"].items())[:5])
        print(f"{r['tick_ms']:>5}{r['period_ms']:>7}{'yes' if r['churn'] else 'no':>6}"
              f"{r['cpu_total_pct']:>7.2f}{m:>6}  {top}")
    out = os.environ.get("OUT", "cpu-sweep-out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cpu_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
