#!/usr/bin/env python3
"""Churn: many short-lived CUDA processes beside `gpufill run` on GPU 0.

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

Writes churn.json and gpufill.log to $OUT. Runs baseline + duration + ~15 s. Usage:

    python3 scripts/churn.py carry/gpufill [--rate 3] [--duration 60] [--baseline 10] [--grace 0.2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import pynvml as N

from robust_lib import CHILD_PTX, Gpufill, cuda_visible, fmt, pids_on

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


def churn(seconds, rate, env, kernel_ms, launches):
    """Starts children for `seconds` at `rate`/s; returns their JSON results."""
    procs, results = [], []
    t_end = time.time() + seconds
    next_at = time.time()
    while time.time() < t_end:
        if time.time() >= next_at:
            procs.append(subprocess.Popen(
                [sys.executable, "-S", "-c", CHILD, CHILD_PTX, str(kernel_ms), str(launches)],
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--baseline", type=float, default=10.0)
    ap.add_argument("--grace", type=float, default=0.2)
    ap.add_argument("--kernel-ms", type=float, default=1.0)
    ap.add_argument("--launches", type=int, default=5)
    args = ap.parse_args()
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(0))

    alone = churn(args.baseline, args.rate, env, args.kernel_ms, args.launches)
    g = Gpufill(args.gpufill, ["--gpus", "0", "--target", "50", "--grace", str(args.grace)],
                log_path=os.path.join(out, "gpufill.log"))
    if g.wait_for("filling", timeout=30) is None:
        print("gpufill never filled"); g.stop(); return 1
    time.sleep(2)
    lister = Lister(h)
    lister.start()
    since_us = int(time.time() * 1e6)
    t0, cpu0 = time.time(), g.cpu()
    beside = churn(args.duration, args.rate, env, args.kernel_ms, args.launches)
    t1 = time.time()
    alive = g.proc.poll() is None
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
    N.nvmlShutdown()
    return 0 if alive and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
