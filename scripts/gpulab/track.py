"""`track`: gpufill on a real GPU: tracking, memory, CPU, power and stop time.

Runs `gpufill run` once per target, reads NVML's own utilization samples
(nvmlDeviceGetSamples, the driver's ring buffer) with pynvml, and prints a table.
Details go to $OUT (or ./bench-out) as JSON. Usage (scripts/gpu-bench.sh runs it):

    python3 scripts/lab.py track --gpufill carry/gpufill [--targets 10,25,50,75,90] [--hold 20]

Definitions (the same as gpufill-core's sim::tracking):
- settle: time from the first `filling` log line (and, separately, from process start)
  to the first sample from which every later sample stays within 2 points;
- MAE: mean absolute error of the samples in the `hold` seconds after settling;
- memory: NVML per-process usedGpuMemory of the gpufill process;
- CPU: (utime + stime) of the process over the hold window, % of one core;
- power: mean board power over the hold window; idle power measured first;
- stop: SIGTERM -> process exit, and the first NVML samples after SIGTERM.
"""
import json
import os
import statistics
import time

from .lib import N, Gpufill, UtilTrace, cpu_seconds, fmt, handle, out_dir, parser, proc_mem_mib


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


def run_target(args, h, target, out):
    trace = UtilTrace(h)
    t_start = time.time()
    g = Gpufill(args.gpufill, ["--gpus", "0", "--target", str(target), *args.extra],
                log_path=os.path.join(out, "runs.log"))
    power, mem = [], []
    deadline = t_start + args.settle_budget + args.hold
    cpu0 = fill_t = None
    while time.time() < deadline and g.alive():
        time.sleep(0.1)
        trace.read()
        fill_t = fill_t or g.wait_for("filling", timeout=0)
        if fill_t and time.time() > fill_t + args.settle_budget:
            if cpu0 is None:
                cpu0 = (time.time(), cpu_seconds(g.pid))
            power.append(N.nvmlDeviceGetPowerUsage(h) / 1000)
            m = proc_mem_mib(h, g.pid)
            if m is not None:
                mem.append(m)
    alive = g.alive()
    cpu = None
    if alive and cpu0:
        cpu = 100 * (cpu_seconds(g.pid) - cpu0[1]) / (time.time() - cpu0[0])
    # Stop: SIGTERM, then watch the process and the next samples.
    t_term = time.time()
    code, took = g.stop(timeout=5)
    time.sleep(0.65)
    samples = trace.samples
    after = trace.read()
    s_fill, mae, held = settle_and_mae(samples, fill_t or t_start, target, args.hold)
    s_start, _, _ = settle_and_mae(samples, t_start, target, args.hold)
    return {
        "target": target,
        "startup_to_filling_s": (fill_t - t_start) if fill_t else None,
        "settle_from_filling_s": s_fill,
        "settle_from_start_s": s_start,
        "mae_points": mae,
        "held_samples": len(held),
        "mem_mib": max(mem) if mem else None,
        "cpu_pct_core": cpu,
        "power_w": statistics.fmean(power) if power else None,
        "exit_after_sigterm_ms": 1000 * took,
        "exit_code": code,
        "samples_after_sigterm": [(round(t - t_term, 3), v) for t, v in after if t > t_term][:4],
        "leftover_gpufill_pids": g.left,
        "samples": [(round(t - t_start, 3), v) for t, v in samples if t <= t_term],
    }


def main(argv):
    ap = parser("track", __doc__)
    ap.add_argument("--gpufill", default="carry/gpufill")
    ap.add_argument("--targets", default="10,25,50,75,90")
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--settle-budget", type=float, default=3.0)
    ap.add_argument("extra", nargs="*", help="extra flags for gpufill run")
    args = ap.parse_args(argv)
    out = out_dir("bench-out")
    h = handle(0)
    env = {
        "gpu": N.nvmlDeviceGetName(h),
        "driver": N.nvmlSystemGetDriverVersion(),
        "idle_power_w": N.nvmlDeviceGetPowerUsage(h) / 1000,
    }
    ts = UtilTrace(h, since=0).finish()
    if len(ts) > 2:
        env["sample_period_ms"] = statistics.median(
            1000 * (b[0] - a[0]) for a, b in zip(ts, ts[1:]))
        env["newest_sample_age_s"] = time.time() - ts[-1][0]
    results = [run_target(args, h, float(t), out) for t in args.targets.split(",")]
    with open(os.path.join(out, "tracking.json"), "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)
    print(json.dumps(env))
    hdr = "target startup_s settle_fill_s settle_start_s mae mem_MiB cpu_% power_W stop_ms after_sigterm leftover"
    print(hdr)
    for r in results:
        print(" ".join([
            fmt(r["target"], 0), fmt(r["startup_to_filling_s"]), fmt(r["settle_from_filling_s"]),
            fmt(r["settle_from_start_s"]), fmt(r["mae_points"]), fmt(r["mem_mib"], 0),
            fmt(r["cpu_pct_core"]), fmt(r["power_w"], 0), fmt(r["exit_after_sigterm_ms"], 0),
            str([v for _, v in r["samples_after_sigterm"]]), str(len(r["leftover_gpufill_pids"])),
        ]))
