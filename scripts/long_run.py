#!/usr/bin/env python3
"""Long run: `gpufill run --gpus 0 --target 50` for `--duration` s with a foreign
PyTorch job (bf16 matmul loop) every `--every` s for `--job` s.

Samples every `--sample` s: gpufill's RSS (/proc), its GPU memory (NVML per-process),
its CPU time; reads NVML's utilization samples. Reports per minute: MAE of the samples
taken while gpufill should be filling (outside each job, its 5 s grace and 2 s to
settle), CPU % of a core, RSS and GPU memory; then growth first minute -> last minute,
yields seen in the log vs jobs started, and whether gpufill survived.

Writes long_run.json and appends to gpufill.log in $OUT. Runs `--duration` + ~5 s.
Usage: python3 scripts/long_run.py carry/gpufill [--duration 300] [--every 60] [--job 15]
"""
import argparse
import json
import os
import sys
import time

import pynvml as N

from robust_lib import Gpufill, fmt, mae, samples_since, torch_job


def gpu_mem_mib(h, pid):
    for p in N.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == pid:
            return (p.usedGpuMemory or 0) / 2**20
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument("--job", type=float, default=15.0)
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--target", type=float, default=50.0)
    args = ap.parse_args()
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    last_ts = max([0] + [int(t * 1e6) for t, _ in samples_since(h, 0)])
    g = Gpufill(args.gpufill, ["--gpus", "0", "--target", str(args.target)],
                log_path=os.path.join(out, "gpufill.log"))
    t0 = g.wait_for("filling", timeout=30)
    if t0 is None:
        print("gpufill never filled"); g.stop(); return 1
    jobs, busy, rows, util = [], [], [], []
    next_job, next_sample, t_end = t0 + args.every / 2, t0, t0 + args.duration
    while time.time() < t_end and g.proc.poll() is None:
        now = time.time()
        if now >= next_job:
            jobs.append(torch_job(0, args.job))
            busy.append((now, now + args.job))
            next_job += args.every
        if now >= next_sample:
            rows.append({"t": now - t0, "rss_kib": g.rss_kib(), "gpu_mib": gpu_mem_mib(h, g.pid),
                         "cpu_s": g.cpu()})
            new = samples_since(h, last_ts)
            if new:
                last_ts = int(new[-1][0] * 1e6)
                util += new
            next_sample += args.sample
        time.sleep(0.05)
    alive = g.proc.poll() is None
    for j in jobs:
        j.wait()
    code, _ = g.stop()

    # Foreign work starts some seconds after the job process (CUDA init); count the
    # whole job plus the grace and settling as not ours to judge.
    def judged(t):
        return t > t0 + 2 and not any(a - 0.5 <= t <= b + 5 + 2 + 5 for a, b in busy)

    minutes = []
    for m in range(int(args.duration // 60)):
        lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
        vals = [v for t, v in util if lo <= t < hi and judged(t)]
        rs = [r for r in rows if 60 * m <= r["t"] < 60 * (m + 1)]
        cpu = (100 * (rs[-1]["cpu_s"] - rs[0]["cpu_s"]) / (rs[-1]["t"] - rs[0]["t"])
               if len(rs) > 1 else None)
        minutes.append({"minute": m, "samples": len(vals), "mae": mae(vals, args.target),
                        "cpu_pct_core": cpu, "rss_kib": rs[-1]["rss_kib"] if rs else None,
                        "gpu_mib": max((r["gpu_mib"] or 0 for r in rs), default=None)})
    r = {
        "alive_throughout": alive, "exit_code": code, "jobs": len(jobs),
        "yield_lines": g.count("yielding"), "warn_lines": g.count("WARN"),
        "error_lines": g.count("ERROR"), "log_lines": len(g.lines),
        "rss_growth_kib": (minutes[-1]["rss_kib"] - minutes[0]["rss_kib"]) if minutes else None,
        "gpu_mem_growth_mib": (minutes[-1]["gpu_mib"] - minutes[0]["gpu_mib"]) if minutes else None,
        "minutes": minutes, "rows": rows,
    }
    with open(os.path.join(out, "long_run.json"), "w") as f:
        json.dump(r, f, indent=1)
    print("== long run: minute samples MAE cpu_% RSS_KiB GPU_MiB")
    for m in minutes:
        print(f"  {m['minute']:3} {m['samples']:5} {fmt(m['mae'])} {fmt(m['cpu_pct_core'])} "
              f"{fmt(m['rss_kib'])} {fmt(m['gpu_mib'], 0)}")
    for k in ("alive_throughout", "exit_code", "jobs", "yield_lines", "warn_lines", "error_lines",
              "log_lines", "rss_growth_kib", "gpu_mem_growth_mib"):
        print(f"  {k:20} {fmt(r[k])}")
    N.nvmlShutdown()
    return 0 if alive and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
