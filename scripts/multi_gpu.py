#!/usr/bin/env python3
"""Many GPUs: `gpufill run --gpus all --target 50` on every GPU of the machine.

Phases: 40 s all GPUs filling; 40 s with a foreign PyTorch job (bf16 matmul loop) on
GPU 0 only; 30 s after it. Per GPU and phase: MAE of NVML's utilization samples
against the target (the phase's first 3 s and, after the job, the 5 s grace left
out), and gpufill's yield lines for that GPU. Expected: GPU 0 yields during the job
and fills again after, every other GPU tracks 50 % throughout. CPU: gpufill's total
CPU % of a core over the run, per GPU (total / GPUs), and per worker thread
(`gpufill-gpuN`, which also launch the kernels, and the driver's threads).

Writes multi_gpu.json and gpufill.log to $OUT. Runs about 2 min. Usage:

    python3 scripts/multi_gpu.py carry/gpufill [--job-gpu 0]
"""
import argparse
import json
import os
import re
import sys
import time

import pynvml as N

from robust_lib import Gpufill, fmt, mae, samples_since, torch_job

PHASES = (("before", 40.0), ("job", 40.0), ("after", 30.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--job-gpu", type=int, default=0)
    ap.add_argument("--target", type=float, default=50.0)
    args = ap.parse_args()
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    last = [max([0] + [int(t * 1e6) for t, _ in samples_since(h, 0)]) for h in hs]
    g = Gpufill(args.gpufill, ["--gpus", "all", "--target", str(args.target)],
                log_path=os.path.join(out, "gpufill.log"))
    # One "filling" line per GPU.
    deadline = time.time() + 60
    while g.count("filling") < n and time.time() < deadline and g.proc.poll() is None:
        time.sleep(0.1)
    t_start, cpu0, threads0 = time.time(), g.cpu(), g.threads_cpu()
    util = [[] for _ in hs]
    bounds, job = {}, None
    t = t_start
    for name, seconds in PHASES:
        bounds[name] = (t, t + seconds)
        if name == "job":
            job = torch_job(args.job_gpu, seconds - 2)
        while time.time() < t + seconds and g.proc.poll() is None:
            time.sleep(0.5)
            for i, h in enumerate(hs):
                new = samples_since(h, last[i])
                if new:
                    last[i] = int(new[-1][0] * 1e6)
                    util[i] += new
        if name == "job":
            job.wait()
        t += seconds
    t_end = time.time()
    alive = g.proc.poll() is None
    cpu = 100 * (g.cpu() - cpu0) / (t_end - t_start) if alive else None
    threads = {k: 100 * (v - threads0.get(k, 0.0)) / (t_end - t_start)
               for k, v in (g.threads_cpu() if alive else {}).items()}
    code, _ = g.stop()

    def yields(i, lo, hi):
        pat = re.compile(rf"gpu\{{gpu={i}\}}.*yielding")
        return sum(1 for t, l in g.lines if lo <= t < hi and pat.search(l))

    per_gpu = []
    for i in range(n):
        row = {"gpu": i}
        for name, (lo, hi) in bounds.items():
            skip = 3 + (5 if name == "after" else 0)
            vals = [v for ts, v in util[i] if lo + skip <= ts < hi]
            row[f"mae_{name}"] = mae(vals, args.target)
            row[f"util_{name}"] = sum(vals) / len(vals) if vals else None
            row[f"yields_{name}"] = yields(i, lo, hi)
        per_gpu.append(row)
    r = {"gpus": n, "alive_throughout": alive, "exit_code": code, "cpu_pct_core_total": cpu,
         "cpu_pct_core_per_gpu": cpu / n if cpu is not None else None,
         "cpu_pct_core_per_thread": threads, "per_gpu": per_gpu}
    with open(os.path.join(out, "multi_gpu.json"), "w") as f:
        json.dump(r, f, indent=1)
    print(f"== {n} GPUs; job on GPU {args.job_gpu} during phase 'job'")
    print("gpu mae_before mae_job util_job yields_job mae_after yields_after")
    for row in per_gpu:
        print(row["gpu"], fmt(row["mae_before"]), fmt(row["mae_job"]), fmt(row["util_job"], 1),
              row["yields_job"], fmt(row["mae_after"]), row["yields_after"])
    print(f"CPU % of a core: total {fmt(cpu)}, per GPU {fmt(r['cpu_pct_core_per_gpu'])}; "
          f"alive {alive}, exit code {code}")
    print("per thread:", {k: round(v, 2) for k, v in sorted(threads.items()) if v > 0.01})
    N.nvmlShutdown()
    return 0 if alive and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
