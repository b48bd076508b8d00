"""Faults: `sigkill`, `churn`, `long-run` (scripts/robustness.sh runs all three).

`sigkill`: how soon the GPU is free when gpufill dies without cleaning up. Per round:
starts `gpufill run --gpus 0 --target 50`, waits until it has filled for 3 s, `kill -9`s
it, then polls every ~1 ms: when the process is gone (reaped), when NVML no longer lists
its PID, and NVML's utilization samples after the kill (the first one whose 200 ms
window lies wholly after the kill should read 0: no kernel of ours outlives the
process, since they are at most 2 ms long). Writes sigkill.json to $OUT. About 10 s a
round:

    python3 scripts/lab.py sigkill carry/gpufill [--rounds 3]

`churn`: many short-lived CUDA processes beside `gpufill run` on GPU 0.

Each child is a bare Python (`-S`) that, through ctypes on libcuda, inits CUDA, takes
the primary context, loads gpufill-cuda/kernels/spin.ptx with cuModuleLoadData, times a few 1 ms
spin kernels (launch to synchronize) and exits: about half a second each. Children
start at `--rate` per second, first for `--baseline` s without gpufill (their kernel
latency alone), then for `--duration` s beside `gpufill run --gpus 0 --grace G` (a
short grace, so gpufill fills between children and yields to each: the hard case).

Reported:
- gpufill: alive all along, exit code after SIGTERM, CPU % of a core during churn,
  yield and fill log lines, warnings and errors;
- overlap as the children see it: kernel latency (2nd launch on) beside gpufill vs
  alone (p50/p99/max) and children slower than the baseline's max + 1 ms: a child
  whose kernel waited behind one of ours;
- overlap as NVML sees it: per-process samples in which gpufill ran kernels while a
  child had been listed since before the sample window began.

Writes churn.json and gpufill.log to $OUT. Runs baseline + duration + ~15 s:

    python3 scripts/lab.py churn carry/gpufill [--rate 3] [--duration 60] [--baseline 10]
        [--grace 0.2]

`long-run`: `gpufill run --gpus 0 --target 50` for `--duration` s with a foreign
PyTorch job (bf16 matmul loop) every `--every` s for `--job` s. Samples every `--sample`
s: gpufill's RSS (/proc), its GPU memory (NVML per-process), its CPU time; reads NVML's
utilization samples. Reports per minute: MAE of the samples taken while gpufill should
be filling (outside each job, its 5 s grace and 2 s to settle), CPU % of a core, RSS and
GPU memory; then growth first minute -> last minute, yields seen in the log vs jobs
started, and whether gpufill survived. Writes long_run.json and appends to gpufill.log
in $OUT. Runs `--duration` + ~5 s:

    python3 scripts/lab.py long-run carry/gpufill [--duration 300] [--every 60] [--job 15]
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from .lib import (N, SPIN_PTX, Gpufill, UtilTrace, cuda_visible, fmt, handle, mae, out_dir,
                  parser, pids_on, proc_mem_mib, torch_job)

CHILD = r"""
import ctypes as C, json, os, sys, time
t0 = time.time()
ptx = open(sys.argv[1], 'rb').read() + b'\0'
cu = C.CDLL('libcuda.so.1')
def ck(r, what):
    if r != 0:
        print(json.dumps({'pid': os.getpid(), 'error': what, 'code': r})); sys.exit(1)
ck(cu.cuInit(0), 'cuInit')
dev = C.c_int(); ck(cu.cuDeviceGet(C.byref(dev), 0), 'cuDeviceGet')
ctx = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), 'cuDevicePrimaryCtxRetain')
ck(cu.cuCtxSetCurrent(ctx), 'cuCtxSetCurrent')
t_ctx = time.time()
mod = C.c_void_p(); ck(cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)), 'cuModuleLoadData')
fn = C.c_void_p(); ck(cu.cuModuleGetFunction(C.byref(fn), mod, b'spin'), 'cuModuleGetFunction')
ns = C.c_ulonglong(int(float(sys.argv[2]) * 1e6))
params = (C.c_void_p * 1)(C.cast(C.byref(ns), C.c_void_p))
lat = []
for _ in range(int(sys.argv[3])):
    s = time.perf_counter()
    ck(cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, None, params, None), 'cuLaunchKernel')
    ck(cu.cuCtxSynchronize(), 'cuCtxSynchronize')
    lat.append((time.perf_counter() - s) * 1e3)
print(json.dumps({'pid': os.getpid(), 'start': t0, 'ctx': t_ctx, 'lat_ms': lat, 'end': time.time()}))
"""


class Lister(threading.Thread):
    """Polls NVML's compute-process list every ~5 ms: first and last sighting per PID."""

    def __init__(self, h):
        super().__init__(daemon=True)
        self.h, self.seen, self.running = h, {}, True

    def run(self):
        while self.running:
            now = time.time()
            for pid in pids_on(self.h):
                first, _ = self.seen.get(pid, (now, now))
                self.seen[pid] = (first, now)
            time.sleep(0.005)


def children(seconds, rate, env, kernel_ms, launches):
    """Starts children for `seconds` at `rate`/s; returns their JSON results."""
    procs, results = [], []
    t_end = time.time() + seconds
    next_at = time.time()
    while time.time() < t_end:
        if time.time() >= next_at:
            procs.append(subprocess.Popen(
                [sys.executable, "-S", "-c", CHILD, SPIN_PTX, str(kernel_ms), str(launches)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
            next_at += 1.0 / rate
        time.sleep(0.002)
    for p in procs:
        try:
            out, err = p.communicate(timeout=30)
            lines = out.strip().splitlines()
            results.append(json.loads(lines[-1]) if lines else
                           {"pid": p.pid, "error": (err.strip().splitlines() or ["?"])[-1],
                            "code": p.returncode})
        except Exception as e:  # a hung child or odd output is a result too
            results.append({"pid": p.pid, "error": repr(e), "code": p.returncode})
    return results


def latency_stats(results):
    lat = [x for r in results for x in r.get("lat_ms", [])[1:]]
    if not lat:
        return {}
    lat.sort()
    return {"n": len(lat), "p50": statistics.median(lat), "p99": lat[int(0.99 * (len(lat) - 1))],
            "max": lat[-1]}


def nvml_overlap(h, gpufill_pid, seen, since_us):
    """gpufill's per-process samples with kernels while a child was listed all window long."""
    try:
        samples = N.nvmlDeviceGetProcessUtilization(h, since_us)
    except N.NVMLError:
        return None, 0
    ours = [(s.timeStamp / 1e6, s.smUtil) for s in samples if s.pid == gpufill_pid and s.smUtil <= 100]
    children = [(a, b) for pid, (a, b) in seen.items() if pid != gpufill_pid]
    bad = 0
    for ts, sm in ours:
        # Listed from before the window (plus the 20 ms gpufill may take to see it).
        if sm > 0 and any(a <= ts - 0.22 and b >= ts for a, b in children):
            bad += 1
    return bad, len(ours)


def churn(argv):
    ap = parser("churn", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--baseline", type=float, default=10.0)
    ap.add_argument("--grace", type=float, default=0.2)
    ap.add_argument("--kernel-ms", type=float, default=1.0)
    ap.add_argument("--launches", type=int, default=5)
    args = ap.parse_args(argv)
    out = out_dir("bench-out")
    h = handle(0)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(0))

    alone = children(args.baseline, args.rate, env, args.kernel_ms, args.launches)
    g = Gpufill(args.gpufill, ["--gpus", "0", "--target", "50", "--grace", str(args.grace)],
                log_path=os.path.join(out, "gpufill.log"))
    if g.wait_for("filling", timeout=30) is None:
        print("gpufill never filled")
        g.stop()
        return 1
    time.sleep(2)
    lister = Lister(h)
    lister.start()
    since_us = int(time.time() * 1e6)
    t0, cpu0 = time.time(), g.cpu()
    beside = children(args.duration, args.rate, env, args.kernel_ms, args.launches)
    t1 = time.time()
    alive = g.alive()
    cpu_pct = 100 * (g.cpu() - cpu0) / (t1 - t0) if alive else None
    lister.running = False
    lister.join()
    bad, n_ours = nvml_overlap(h, g.pid, lister.seen, since_us)
    code, stop_s = g.stop()

    base, side = latency_stats(alone), latency_stats(beside)
    limit = base.get("max", 0) + 1.0
    slow = [r["pid"] for r in beside if any(x > limit for x in r.get("lat_ms", [])[1:])]
    r = {
        "rate_per_s": args.rate, "grace_s": args.grace,
        "children_alone": len(alone), "children_beside": len(beside),
        "child_errors": [c for c in alone + beside if "error" in c][:10],
        "gpufill_alive_throughout": alive, "gpufill_exit_code": code, "gpufill_stop_s": stop_s,
        "gpufill_cpu_pct_core": cpu_pct,
        "yield_lines": g.count("yielding", t0, t1), "fill_lines": g.count("filling", t0, t1),
        "warn_lines": g.count("WARN", t0, t1), "error_lines": g.count("ERROR", t0, t1),
        "log_lines_per_min": 60 * g.count("", t0, t1) / (t1 - t0),
        "latency_alone_ms": base, "latency_beside_ms": side,
        "children_slower_than_alone_max_plus_1ms": len(slow),
        "nvml_samples_gpufill_busy_while_child_listed": bad, "nvml_gpufill_samples": n_ours,
    }
    with open(os.path.join(out, "churn.json"), "w") as f:
        json.dump(r, f, indent=1)
    print("== churn")
    for k, v in r.items():
        print(f"  {k:44} {fmt(v) if not isinstance(v, (dict, list)) else v}")
    return 0 if alive and code == 0 else 1


# ------------------------------------------------------------------ sigkill
def one_round(exe, h, log_path):
    g = Gpufill(exe, ["--gpus", "0", "--target", "50"], log_path=log_path)
    if g.wait_for("filling", timeout=30) is None:
        g.stop()
        return {"error": "gpufill never filled"}
    time.sleep(3)
    trace = UtilTrace(h)
    t_kill = time.time()
    os.kill(g.pid, signal.SIGKILL)
    gone = unlisted = None
    while time.time() < t_kill + 5 and (gone is None or unlisted is None):
        now = time.time()
        if gone is None and not g.alive():
            gone = now
        if unlisted is None and g.pid not in pids_on(h):
            unlisted = now
        time.sleep(0.001)
    time.sleep(1.0)
    after = [(round(t - t_kill, 3), v) for t, v in trace.finish()]
    g.stop()
    # Samples are stamped at the end of their window; a window wholly after the kill
    # ends at least one period (200 ms on an H200) after it.
    clean = [v for t, v in after if t >= 0.2]
    return {
        "reaped_ms": 1000 * (gone - t_kill) if gone else None,
        "unlisted_ms": 1000 * (unlisted - t_kill) if unlisted else None,
        "samples_after_kill": after[:8],
        "first_full_window_after_kill": clean[0] if clean else None,
        "busy_windows_after_kill": sum(1 for v in clean if v > 0),
    }


def sigkill(argv):
    ap = parser("sigkill", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    out = out_dir("bench-out")
    h = handle(0)
    rounds = [one_round(args.gpufill, h, os.path.join(out, "gpufill.log"))
              for _ in range(args.rounds)]
    with open(os.path.join(out, "sigkill.json"), "w") as f:
        json.dump(rounds, f, indent=1)
    print("== SIGKILL: round reaped_ms unlisted_ms first_full_window_util busy_windows_after "
          "samples_after_kill")
    for i, r in enumerate(rounds):
        print(i, fmt(r.get("reaped_ms"), 1), fmt(r.get("unlisted_ms"), 1),
              fmt(r.get("first_full_window_after_kill")), fmt(r.get("busy_windows_after_kill")),
              r.get("samples_after_kill", r.get("error")))


# ------------------------------------------------------------------ long run
def long_run(argv):
    ap = parser("long-run", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument("--job", type=float, default=15.0)
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--target", type=float, default=50.0)
    args = ap.parse_args(argv)
    out = out_dir("bench-out")
    h = handle(0)
    trace = UtilTrace(h)
    g = Gpufill(args.gpufill, ["--gpus", "0", "--target", str(args.target)],
                log_path=os.path.join(out, "gpufill.log"))
    t0 = g.wait_for("filling", timeout=30)
    if t0 is None:
        print("gpufill never filled")
        g.stop()
        return 1
    jobs, busy, rows = [], [], []
    next_job, next_sample, t_end = t0 + args.every / 2, t0, t0 + args.duration
    while time.time() < t_end and g.alive():
        now = time.time()
        if now >= next_job:
            jobs.append(torch_job(0, args.job))
            busy.append((now, now + args.job))
            next_job += args.every
        if now >= next_sample:
            rows.append({"t": now - t0, "rss_kib": g.rss_kib(), "gpu_mib": proc_mem_mib(h, g.pid),
                         "cpu_s": g.cpu()})
            trace.read()
            next_sample += args.sample
        time.sleep(0.05)
    alive = g.alive()
    for j in jobs:
        j.wait()
    code, _ = g.stop()
    minutes = per_minute(args, t0, busy, rows, trace.samples)
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
    return 0 if alive and code == 0 else 1


def per_minute(args, t0, busy, rows, util):
    """Per minute: NVML samples judged, their MAE, CPU %, RSS and GPU memory."""
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
    return minutes
