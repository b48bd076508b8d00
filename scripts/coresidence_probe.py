#!/usr/bin/env python3
"""Probe: launch shapes beside a mostly-idle inference service (no MPS), and whether our
own kernels' start delay reveals the service's bursts.

Two processes share the GPU:
- the service (this process): torchvision ResNet-50, batch 1, fp32, bursts of `--burst`
  requests every `--gap` seconds, each request timed from input copy to result on the host;
- a filler (a child process, CuPy): a 1-warp `__nanosleep` spin kernel in one of these shapes
  - `queued`: gpufill's shape before issue 16: 2 ms kernels, duty x 50 ms queued each 50 ms;
  - `depth1:L`: one kernel of L us in flight at a time, a host-timed gap after it (duty 50 %);
  - `sense:L`: `depth1:L`, and each kernel's start delay (GPU event time against the host's
    launch time, minus its running minimum) above `--threshold-us` stops the filler for
    `--hold-s`.

Configurations are interleaved `--reps` times. Prints a table (p50, p99, max of the requests
and of each burst's first request, utilization between bursts, the filler's duty) and writes
the raw numbers to `--out`/coresidence-probe.json.

Run on the GPU machine: python3 scripts/coresidence_probe.py --out "$OUT"
"""
import argparse
import json
import os
import select
import subprocess
import sys
import time

SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    now = start;
    while (now - start < ns) {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}
"""


def mono_us():
    return time.monotonic_ns() / 1e3


# ---------------------------------------------------------------- filler (child process)
def filler(args):
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    kernel((1,), (32,), (np.uint64(1000),), stream=stream)
    stream.synchronize()
    print("ready", flush=True)

    mode, L = "off", 0.0
    log = []  # per kernel: (host launch us, delay us, kernel us)
    events = []  # detections: host us
    ref = cp.cuda.Event()
    ref_h = 0.0
    base = []
    pause_until = 0.0
    next_launch = 0.0
    last_cmd_check = 0.0

    def rebase():
        nonlocal ref_h
        stream.synchronize()
        ref_h = mono_us()
        ref.record(stream)
        stream.synchronize()

    while True:
        now = mono_us()
        if now - last_cmd_check > 2000 or mode == "off":
            last_cmd_check = now
            r, _, _ = select.select([sys.stdin], [], [], 0.0 if mode != "off" else 0.05)
            if r:
                line = sys.stdin.readline().strip()
                if not line or line == "quit":
                    break
                stream.synchronize()
                if line == "dump":
                    print(json.dumps({"kernels": log, "detections": events}), flush=True)
                    log, events = [], []
                    continue
                mode = line
                if mode.startswith(("depth1:", "sense:")):
                    L = float(mode.split(":")[1])
                    rebase()
                    base = []
                pause_until = 0.0
                next_launch = mono_us()
                print("ok", flush=True)
                continue
        if mode == "off":
            continue
        if mode == "queued":
            # 2 ms kernels, 25 ms queued at the start of every 50 ms.
            if now >= next_launch:
                for _ in range(12):
                    kernel((1,), (32,), (np.uint64(2_000_000),), stream=stream)
                kernel((1,), (32,), (np.uint64(1_000_000),), stream=stream)
                log.append((now, 0.0, 25000.0))
                next_launch += 50_000
            time.sleep(max(0.0, (next_launch - mono_us()) / 1e6 - 0.0002))
            continue
        # depth1 / sense
        if now < pause_until:
            time.sleep(min(0.002, (pause_until - now) / 1e6))
            continue
        if now < next_launch:
            time.sleep(max(0.0, (next_launch - now) / 1e6 - 0.00006))
            continue
        if now - ref_h > 5e6:
            rebase()
            now = mono_us()
        ev_s, ev_e = cp.cuda.Event(), cp.cuda.Event()
        h = mono_us()
        ev_s.record(stream)
        kernel((1,), (32,), (np.uint64(int(L * 1000)),), stream=stream)
        ev_e.record(stream)
        time.sleep(L / 1e6)
        while not ev_e.done:
            time.sleep(0.00002)
        done_h = mono_us()
        raw = cp.cuda.get_elapsed_time(ref, ev_s) * 1000.0 - (h - ref_h)
        base.append(raw)
        if len(base) > 400:
            base.pop(0)
        delay = raw - min(base)
        ran = cp.cuda.get_elapsed_time(ev_s, ev_e) * 1000.0
        log.append((h, delay, ran))
        # The gap: as long as the kernel ran, so the duty is 50 %.
        next_launch = done_h + L
        if mode.startswith("sense:") and delay > args.threshold_us:
            events.append(h)
            pause_until = done_h + args.hold_s * 1e6
    stream.synchronize()


# ---------------------------------------------------------------- service (this process)
def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[i]


def main(args):
    import pynvml
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = torchvision.models.resnet50(weights=None).to(dev).eval()
    x_host = torch.randn(1, 3, 224, 224).pin_memory()

    def request():
        t = time.perf_counter()
        with torch.no_grad():
            y = model(x_host.to(dev, non_blocking=True))
            y.cpu()
        return (time.perf_counter() - t) * 1e3

    for _ in range(100):
        request()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    child = subprocess.Popen(
        [sys.executable, __file__, "--role", "filler",
         "--threshold-us", str(args.threshold_us), "--hold-s", str(args.hold_s)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(cmd, expect="ok"):
        child.stdin.write(cmd + "\n")
        child.stdin.flush()
        line = child.stdout.readline().strip()
        if expect and line != expect:
            raise RuntimeError(f"filler answered {line!r} to {cmd!r}")
        return line

    assert child.stdout.readline().strip() == "ready"
    configs = args.configs.split(",")
    results = []
    wall_to_mono = time.time() * 1e6 - mono_us()
    for rep in range(args.reps):
        for cfg in configs:
            send(cfg if cfg != "alone" else "off")
            time.sleep(args.settle_s)
            _, last_ts_start = None, int(time.time() * 1e6)
            bursts = []
            t_next = time.monotonic() + 0.05
            for b in range(args.bursts):
                time.sleep(max(0.0, t_next - time.monotonic()))
                start = mono_us()
                lat = [request() for _ in range(args.burst)]
                bursts.append({"start_us": start, "end_us": mono_us(), "lat_ms": lat})
                t_next += args.gap
            time.sleep(max(0.0, t_next - time.monotonic()))
            end = mono_us()
            send("off")
            dump = json.loads(send("dump", expect=None))
            try:
                _, samples = pynvml.nvmlDeviceGetSamples(
                    handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, last_ts_start)
                util = [(s.timeStamp - wall_to_mono, s.sampleValue.uiVal) for s in samples]
            except pynvml.NVMLError:
                util = []
            t0 = bursts[0]["start_us"]
            # Utilization between bursts: samples whose 200 ms window meets no burst.
            quiet = [v for ts, v in util if t0 + 2e5 < ts <= end and not any(
                b["start_us"] - 1e4 < ts and ts - 2.2e5 < b["end_us"] + 5e4 for b in bursts)]
            ks = [k for k in dump["kernels"] if t0 <= k[0] <= end]
            duty = sum(k[2] for k in ks) / (end - t0) if ks else 0.0
            # Detection: first detection after each burst start, within the burst.
            det = []
            for b in bursts:
                hits = [d for d in dump["detections"] if b["start_us"] <= d <= b["end_us"]]
                det.append((hits[0] - b["start_us"]) / 1e3 if hits else None)
            false_det = [d for d in dump["detections"] if not any(
                b["start_us"] - 2e3 <= d <= b["end_us"] + 5e3 for b in bursts)]
            lat = [x for b in bursts for x in b["lat_ms"][args.skip_first:]]
            first = [b["lat_ms"][0] for b in bursts]
            results.append({
                "rep": rep, "config": cfg, "lat": lat, "first": first,
                "util_quiet": quiet, "duty": duty, "detect_ms": det,
                "false_detections": len(false_det), "kernels": len(ks),
                "delays_us": [k[1] for k in ks][:20000],
            })
            r = results[-1]
            print(f"{rep} {cfg:12s} p50 {pct(lat, 50):6.2f} p99 {pct(lat, 99):6.2f} "
                  f"max {max(lat):6.2f} first p50 {pct(first, 50):6.2f} "
                  f"util between {sum(quiet) / max(1, len(quiet)):5.1f} (n={len(quiet)}) "
                  f"duty {duty:5.3f} detected {sum(d is not None for d in det)}/{len(det)} "
                  f"false {len(false_det)}", flush=True)
    send("quit", expect=None)
    child.wait(timeout=10)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "coresidence-probe.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f)
    # Summary: per config, the median over reps of p50 and p99, and ratio to alone.
    print("\nconfig        p50 ms [reps]              p99 ms [reps]            first p50  util  duty")
    for cfg in configs:
        rs = [r for r in results if r["config"] == cfg]
        p50 = [pct(r["lat"], 50) for r in rs]
        p99 = [pct(r["lat"], 99) for r in rs]
        fp = [pct(r["first"], 50) for r in rs]
        uq = [sum(r["util_quiet"]) / max(1, len(r["util_quiet"])) for r in rs]
        print(f"{cfg:12s} {pct(p50, 50):6.3f} {['%.3f' % v for v in p50]} "
              f"{pct(p99, 50):6.3f} {['%.2f' % v for v in p99]} {pct(fp, 50):6.2f} "
              f"{pct(uq, 50):5.1f} {pct([r['duty'] for r in rs], 50):5.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--role", default="main")
    p.add_argument("--out", default="/tmp/coresidence")
    p.add_argument("--configs", default="alone,depth1:250,depth1:500,depth1:1000,sense:250,sense:500,queued")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bursts", type=int, default=8)
    p.add_argument("--burst", type=int, default=20)
    p.add_argument("--gap", type=float, default=1.0)
    p.add_argument("--settle-s", type=float, default=0.5)
    p.add_argument("--skip-first", type=int, default=0)
    p.add_argument("--threshold-us", type=float, default=30.0)
    p.add_argument("--hold-s", type=float, default=0.3)
    a = p.parse_args()
    if a.role == "filler":
        filler(a)
    else:
        main(a)
