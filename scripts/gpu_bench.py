#!/usr/bin/env python3
"""Measure gpufill on a real GPU: tracking, memory, CPU, power and stop time.

Runs `gpufill run` once per target, reads NVML's own utilization samples
(nvmlDeviceGetSamples, the driver's ring buffer) with pynvml, and prints a table.
Details go to $OUT (or ./bench-out) as JSON. Usage:

    python3 scripts/gpu_bench.py --gpufill carry/gpufill [--targets 10,25,50,75,90] [--hold 20]

Definitions (the same as gpufill-core's sim::tracking):
- settle: time from the first `filling` log line (and, separately, from process start)
  to the first sample from which every later sample stays within 2 points;
- MAE: mean absolute error of the samples in the `hold` seconds after settling;
- memory: NVML per-process usedGpuMemory of the gpufill process;
- CPU: (utime + stime) of the process over the hold window, % of one core;
- power: mean board power over the hold window; idle power measured first;
- stop: SIGTERM -> process exit, and the first NVML samples after SIGTERM.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import pynvml as N

CLK = os.sysconf("SC_CLK_TCK")


def samples_since(h, last_ts):
    try:
        _, s = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last_ts)
    except N.NVMLError as e:
        if e.value == N.NVML_ERROR_NOT_FOUND:
            return []
        raise
    return [(x.timeStamp / 1e6, x.sampleValue.uiVal) for x in s if x.timeStamp > last_ts]


def task_cpu_seconds(task):
    """CPU seconds of one thread, `task` being e.g. "123/task/125": its run time from
    schedstat (nanoseconds), else utime+stime from stat (clock ticks of 10 ms)."""
    try:
        with open(f"/proc/{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{task}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / CLK


def cpu_seconds(pid):
    """CPU seconds of process `pid`: the sum over its live threads (see task_cpu_seconds)."""
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += task_cpu_seconds(f"{pid}/task/{tid}")
        except OSError:
            pass
    return total


def proc_mem_mib(h, pid):
    for p in N.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == pid:
            return (p.usedGpuMemory or 0) / 2**20
    return None


def settle_and_mae(samples, start, target, hold):
    after = [(t, v) for t, v in samples if t >= start]
    bad = [i for i, (_, v) in enumerate(after) if abs(v - target) > 2]
    first = bad[-1] + 1 if bad else 0
    if first >= len(after):
        return None, None, []
    t0 = after[first][0]
    held = [v for t, v in after[first:] if t <= t0 + hold]
    mae = statistics.fmean(abs(v - target) for v in held) if held else None
    return t0 - start, mae, held


def run_target(args, h, target, out_dir):
    cmd = [args.gpufill, "run", "--gpus", "0", "--target", str(target)] + args.extra
    N.nvmlDeviceGetSamples  # noqa: B018 (presence check)
    last_ts = max([0] + [int(t * 1e6) for t, _ in samples_since(h, 0)])
    t_start = time.time()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    marks = {}
    log = []

    def reader():
        for line in proc.stderr:
            now = time.time()
            log.append(f"{now - t_start:8.3f} {line.rstrip()}")
            if "filling" in line and "fill" not in marks:
                marks["fill"] = now

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    samples, power, mem = [], [], []
    deadline = t_start + args.settle_budget + args.hold
    cpu0 = None
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
        new = samples_since(h, last_ts)
        if new:
            last_ts = int(new[-1][0] * 1e6)
            samples += new
        if "fill" in marks and time.time() > marks["fill"] + args.settle_budget:
            if cpu0 is None:
                cpu0 = (time.time(), cpu_seconds(proc.pid))
            power.append(N.nvmlDeviceGetPowerUsage(h) / 1000)
            m = proc_mem_mib(h, proc.pid)
            if m is not None:
                mem.append(m)
    alive = proc.poll() is None
    cpu = None
    if alive and cpu0:
        cpu = 100 * (cpu_seconds(proc.pid) - cpu0[1]) / (time.time() - cpu0[0])
    # Stop: SIGTERM, then watch the process and the next samples.
    t_term = time.time()
    if alive:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    t_exit = time.time()
    time.sleep(0.65)
    after = samples_since(h, last_ts)
    th.join(timeout=1)
    fill_t = marks.get("fill")
    s_fill, mae, held = settle_and_mae(samples, fill_t or t_start, target, args.hold)
    s_start, _, _ = settle_and_mae(samples, t_start, target, args.hold)
    leftover = subprocess.run(["pgrep", "-x", "gpufill"], capture_output=True).stdout.decode().split()
    r = {
        "target": target,
        "startup_to_filling_s": (fill_t - t_start) if fill_t else None,
        "settle_from_filling_s": s_fill,
        "settle_from_start_s": s_start,
        "mae_points": mae,
        "held_samples": len(held),
        "mem_mib": max(mem) if mem else None,
        "cpu_pct_core": cpu,
        "power_w": statistics.fmean(power) if power else None,
        "exit_after_sigterm_ms": 1000 * (t_exit - t_term),
        "exit_code": proc.returncode,
        "samples_after_sigterm": [(round(t - t_term, 3), v) for t, v in after if t > t_term][:4],
        "leftover_gpufill_pids": leftover,
        "samples": [(round(t - t_start, 3), v) for t, v in samples],
    }
    with open(os.path.join(out_dir, "runs.log"), "a") as f:
        f.write(f"==== target {target}: {' '.join(cmd)}\n" + "\n".join(log) + "\n")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufill", default="carry/gpufill")
    ap.add_argument("--targets", default="10,25,50,75,90")
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--settle-budget", type=float, default=3.0)
    ap.add_argument("extra", nargs="*", help="extra flags for gpufill run")
    args = ap.parse_args()
    out_dir = os.environ.get("OUT", "bench-out")
    os.makedirs(out_dir, exist_ok=True)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    env = {
        "gpu": N.nvmlDeviceGetName(h),
        "driver": N.nvmlSystemGetDriverVersion(),
        "idle_power_w": N.nvmlDeviceGetPowerUsage(h) / 1000,
    }
    ts = samples_since(h, 0)
    if len(ts) > 2:
        env["sample_period_ms"] = statistics.median(
            1000 * (b[0] - a[0]) for a, b in zip(ts, ts[1:]))
        env["newest_sample_age_s"] = time.time() - ts[-1][0]
    results = [run_target(args, h, float(t), out_dir) for t in args.targets.split(",")]
    with open(os.path.join(out_dir, "tracking.json"), "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)
    print(json.dumps(env))
    hdr = "target startup_s settle_fill_s settle_start_s mae mem_MiB cpu_% power_W stop_ms after_sigterm leftover"
    print(hdr)
    fmt = lambda x, p=2: "-" if x is None else (f"{x:.{p}f}" if isinstance(x, float) else str(x))
    for r in results:
        print(" ".join([
            fmt(r["target"], 0), fmt(r["startup_to_filling_s"]), fmt(r["settle_from_filling_s"]),
            fmt(r["settle_from_start_s"]), fmt(r["mae_points"]), fmt(r["mem_mib"], 0),
            fmt(r["cpu_pct_core"]), fmt(r["power_w"], 0), fmt(r["exit_after_sigterm_ms"], 0),
            str([v for _, v in r["samples_after_sigterm"]]), str(len(r["leftover_gpufill_pids"])),
        ]))
    N.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main())
