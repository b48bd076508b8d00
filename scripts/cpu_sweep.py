#!/usr/bin/env python3
"""gpufill's CPU per thread against its loop tick and launch period, and under churn.

For each (tick_ms, period_ms) runs `gpufill run --gpus 0 --target 50` for 3 s of warm-up
plus `--hold` s, and reports CPU % of a core per thread over the hold (run time from
/proc/PID/task/*/schedstat, in ns), and the mean absolute error of NVML's utilization
(polled every 100 ms) against 50. Then the default settings once more while short CUDA
processes start at 3 a second (scripts/churn.py's children) with `--grace 0.2`, as in
churn.py, to see which thread pays for churn.

To compare builds side by side, name them with `--exe LABEL=PATH` and prefix configs
with the label (`old:10/20`); `--repeats N` runs the whole list N times, interleaved,
and the summary gives the median of each row.

    python3 scripts/cpu_sweep.py carry/gpufill [--hold 8] [--configs 10/20,25/50/5000] [--no-churn]
    python3 scripts/cpu_sweep.py --exe old=carry-old/gpufill --exe new=carry/gpufill \
        --configs old:10/20,new:20/20 --repeats 3 --no-churn

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


def measure(exe, h, tick, period, hold, during=None, extra=(), label="", kernel_us=None,
            target=50):
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(f"tick_ms = {tick}\n[load]\nperiod_ms = {period}\n")
    if kernel_us:
        cfg.write(f"max_kernel_us = {kernel_us}\n")
    cfg.close()
    g = Gpufill(exe, ["--gpus", "0", "--target", str(target), "--config", cfg.name, *extra])
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
        "exe": label or exe, "tick_ms": tick, "period_ms": period, "max_kernel_us": kernel_us,
        "churn": bool(during),
        "cpu_total_pct": sum(per.values()),
        "cpu_by_thread_pct": dict(sorted(grouped.items(), key=lambda kv: -kv[1])),
        "mae_nvml_util": mae(util, target) if not during else None,
        "yield_lines": g.count("yielding"),
    }


def parse_config(text, exes, default_exe):
    """`[label:]tick/period[/max_kernel_us]` -> (label, path, tick, period, kernel_us)."""
    label, _, spec = text.rpartition(":")
    numbers = [int(x) for x in spec.split("/")]
    tick, period, kernel_us = (numbers + [None])[:3]
    if label and label not in exes:
        sys.exit(f"unknown build label {label!r}: give it with --exe {label}=PATH")
    return label, exes.get(label, default_exe), tick, period, kernel_us


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--exe", action="append", default=[], metavar="LABEL=PATH",
                    help="a build to compare, used by configs prefixed with LABEL:")
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--configs", default=",".join(f"{t}/{p}" for t, p in CONFIGS),
                    help="[label:]tick_ms/period_ms[/max_kernel_us], comma-separated")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-churn", action="store_true")
    args = ap.parse_args()
    exes = dict(e.split("=", 1) for e in args.exe)
    configs = [parse_config(c, exes, args.gpufill) for c in args.configs.split(",")]
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    rows = []
    for _ in range(args.repeats):
        for label, exe, t, p, k in configs:
            rows.append(measure(exe, h, t, p, args.hold, label=label, kernel_us=k))
    env = dict(os.environ)

    def children():
        churn.churn(args.hold, 3, env, 1, 3)

    if not args.no_churn:
        label, exe, t, p, k = configs[0]
        rows.append(measure(exe, h, t, p, args.hold, during=children,
                            extra=["--grace", "0.2"], label=label, kernel_us=k))
    print(f"{'build':>8}{'tick':>5}{'period':>7}{'kernel':>7}{'churn':>6}{'cpu%':>7}{'mae':>6}"
          "  threads (% of a core)")
    for r in rows:
        m = "-" if r["mae_nvml_util"] is None else f"{r['mae_nvml_util']:.2f}"
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(r["cpu_by_thread_pct"].items())[:5])
        kernel = r["max_kernel_us"] or "-"
        print(f"{os.path.basename(r['exe']):>8}{r['tick_ms']:>5}{r['period_ms']:>7}{kernel:>7}"
              f"{'yes' if r['churn'] else 'no':>6}{r['cpu_total_pct']:>7.2f}{m:>6}  {top}")
    if args.repeats > 1:
        print("medians over the repeats:")
        for label, exe, t, p, k in configs:
            mine = [r for r in rows if r["exe"] == (label or exe) and r["tick_ms"] == t
                    and r["period_ms"] == p and r["max_kernel_us"] == k and not r["churn"]]
            cpu = [r["cpu_total_pct"] for r in mine]
            err = [r["mae_nvml_util"] for r in mine]
            print(f"{label or exe:>8}{t:>5}{p:>7}{k or '-':>7}  cpu% {median(cpu):.2f} "
                  f"(of {', '.join(f'{c:.2f}' for c in cpu)}), mae {median(err):.2f}")
    out = os.environ.get("OUT", "cpu-sweep-out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cpu_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
