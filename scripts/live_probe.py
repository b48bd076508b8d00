#!/usr/bin/env python3
"""Issue 21's first GPU probe: can one kernel of ours in flight see a live service's
isolated requests in its own start times, and at what CPU?

Runs, on the GPU machine (nvcc, PyTorch and pynvml there):
1. `live_probe nvml`: CPU of one NVML process-list read and one utilization read.
2. The pacer (scripts/live_probe.cu: one spin_sleep kernel in flight, timing events S/E
   around it) alone, for several kernel/gap shapes: how late our kernels start with
   nobody else (false alarms), and the CPU per kernel.
3. A service of isolated sub-millisecond requests (a small bf16 MLP, batch 1, input
   copied in and the answer copied out, Poisson arrivals at --rate a second) running the
   whole time, with the pacer started and stopped in phases (off, shape, off, shape ...):
   each request's latency by phase, and which requests a late start of ours revealed.
4. gpufill (carry/gpufill, when present) on an idle GPU and beside an idle holder: CPU
   per thread (where a filling gpufill's CPU goes).

Usage: python3 scripts/live_probe.py --out "$OUT" [--rate 20] [--phase 10]
Prints a table; raw CSVs go to $OUT/live-probe.tar.gz.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time

from live_lib import latency_line, pct, schedstat

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PTX = os.path.join(ROOT, "gpufill-cuda", "kernels", "spin.ptx")
BIN = "/tmp/live_probe"


# ------------------------------------------------------------------ service worker
def service(argv):
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float)
    p.add_argument("--until", type=float)  # time.monotonic() to stop at
    p.add_argument("--rate-after", type=float, default=None)  # from --switch-at on
    p.add_argument("--switch-at", type=float, default=None)
    p.add_argument("--out")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=1024)
    a = p.parse_args(argv)
    import random
    dev = torch.device("cuda")
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.dim, a.dim), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev, torch.bfloat16).eval()
    x = torch.randn(1, a.dim, dtype=torch.bfloat16).pin_memory()

    def request():
        with torch.no_grad():
            model(x.to(dev, non_blocking=True)).cpu()

    for _ in range(300):
        request()
    print("ready", flush=True)
    rng = random.Random(1)
    rows = []
    t_next = time.monotonic()
    while True:
        rate = a.rate if a.switch_at is None or t_next < a.switch_at else a.rate_after
        t_next += max(0.002, rng.expovariate(rate))
        if t_next > a.until:
            break
        while time.monotonic() < t_next:
            time.sleep(max(0.0, t_next - time.monotonic()))
        t0 = time.monotonic_ns()
        request()
        rows.append((t0, time.monotonic_ns()))
    with open(a.out, "w") as f:
        f.write("t0_ns,t1_ns\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]}\n")


def holder(argv):
    import torch
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    time.sleep(float(argv[0]))


# ------------------------------------------------------------------ analysis
def read_pacer(path):
    rows, meta = [], {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                for kv in line[1:].split():
                    k, v = kv.split("=")
                    meta[k] = float(v)
            elif line[0].isdigit():
                n, tb, ta, td, ds, dk, late = line.strip().split(",")
                rows.append((int(tb), int(ta), int(td), float(ds), float(dk), int(late)))
    return rows, meta


def lateness(rows, key=1, drift=1e-4):
    """Each kernel's start lateness (us) against a running minimum of
    (GPU start - host launch), which may rise by `drift` (100 ppm) to follow the two
    clocks apart; `retro` marks kernels revealed late by the next one starting earlier."""
    out, c, m = [], 0.0, 0.0
    for i, r in enumerate(rows):
        if i == 0:
            out.append(0.0)
            continue
        dt = (r[key] - rows[i - 1][key]) / 1e3
        c += r[3] - dt
        m_pred = m + drift * dt
        out.append(c - m_pred)
        m = min(c, m_pred)
    # A kernel after which the offset fell by more than its lateness was late itself.
    retro = [0.0] * len(out)
    cs, c = [], 0.0
    for i, r in enumerate(rows):
        if i:
            c += r[3] - (r[key] - rows[i - 1][key]) / 1e3
        cs.append(c)
    for i in range(1, len(cs)):
        retro[i - 1] = max(retro[i - 1], cs[i - 1] - cs[i])
    return out, retro


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        {"service": service, "holder": holder}[sys.argv[2]](sys.argv[3:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--phase", type=float, default=10)
    ap.add_argument("--shapes", default="500/500,1000/1000,2000/2000,250/250,5/10000")
    ap.add_argument("--gpufill", default=os.path.join(ROOT, "carry", "gpufill"))
    ap.add_argument("--parts", default="pace")
    a = ap.parse_args()
    work = "/tmp/live-probe"
    os.makedirs(work, exist_ok=True)
    subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", BIN, os.path.join(HERE, "live_probe.cu"), "-lcuda", "-ldl"],
                   check=True)
    if a.parts == "diag":
        diag(a, work)
        return
    if a.parts == "long":
        long_kernels(a, work)
        with tarfile.open(os.path.join(a.out, "live-long.tar.gz"), "w:gz") as t:
            t.add(work, arcname="live-long")
        return
    if a.parts == "signals":
        signals(a, work)
        with tarfile.open(os.path.join(a.out, "live-signals.tar.gz"), "w:gz") as t:
            t.add(work, arcname="live-signals")
        return
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip())
    print(subprocess.run([BIN, "nvml", "20000"], capture_output=True, text=True).stdout.strip())
    shapes = [tuple(int(x) for x in s.split("/")) for s in a.shapes.split(",")]
    summary = {}

    # 2. pacer alone
    print("\npacer alone: lateness of our starts (us), CPU per kernel")
    print(f"{'shape':>10} {'kernels':>7} {'p50':>6} {'p99':>6} {'p99.9':>6} {'max':>7} "
          f"{'>30':>4} {'>50':>4} {'cpu/k us':>8} {'thread%':>7} {'proc%':>6}")
    for k, g in shapes[:3] + [shapes[4]] if len(shapes) > 4 else shapes:
        out = os.path.join(work, f"alone-{k}-{g}.csv")
        subprocess.run([BIN, "pace", PTX, str(k), str(g), "5", out], check=True)
        rows, meta = read_pacer(out)
        late, _ = lateness(rows)
        body = late[10:]
        kern = max(1, meta["kernels"])
        print(f"{k:>5}/{g:<4} {int(kern):>7} {pct(body, 50):6.1f} {pct(body, 99):6.1f} "
              f"{pct(body, 99.9):6.1f} {max(body):7.1f} {sum(x > 30 for x in body):4d} "
              f"{sum(x > 50 for x in body):4d} {meta['cpu_thread_us'] / kern:8.2f} "
              f"{meta['cpu_thread_us'] / 1e4 / meta['seconds']:7.2f} "
              f"{meta['cpu_process_us'] / 1e4 / meta['seconds']:6.2f}")
        summary[f"alone {k}/{g}"] = {"late_p99": pct(body, 99), "late_max": max(body),
                                     "cpu_per_kernel_us": meta["cpu_thread_us"] / kern}

    # 3. the service with the pacer in phases
    phases = []
    for s in shapes:
        phases += [None, s]
    phases += [None]
    t_start = time.monotonic() + 25  # service warm-up
    until = t_start + a.phase * len(phases) + 1
    svc_out = os.path.join(work, "service.csv")
    svc = subprocess.Popen([sys.executable, __file__, "--worker", "service", "--rate", str(a.rate),
                            "--until", str(until), "--out", svc_out], stdout=subprocess.PIPE, text=True)
    svc.stdout.readline()
    time.sleep(max(0.0, t_start - time.monotonic()))
    spans = []
    for i, s in enumerate(phases):
        p0 = t_start + i * a.phase
        time.sleep(max(0.0, p0 - time.monotonic()))
        if s is None:
            spans.append((int(p0 * 1e9), int((p0 + a.phase) * 1e9), None, None))
            continue
        k, g = s
        out = os.path.join(work, f"with-{i}-{k}-{g}.csv")
        subprocess.run([BIN, "pace", PTX, str(k), str(g), str(a.phase - 0.6), out], check=True)
        spans.append((int(p0 * 1e9), int((p0 + a.phase) * 1e9), s, out))
    svc.wait()
    reqs = read_requests(svc_out)

    print(f"\nservice ({a.rate}/s isolated requests) by phase: latency (ms), and requests a "
          "late start of ours revealed")
    print(f"{'phase':>10} {'n':>4} {'p50':>6} {'mean':>6} {'p90':>6} {'p99':>6} "
          f"{'met':>5} {'det30':>5} {'det50':>5} {'fp30/s':>6} {'cpu%':>5}")
    alone_p50 = []
    for p0, p1, s, out in spans:
        inside = [r for r in reqs if p0 + 0.7e9 <= r[0] < p1 - 0.2e9]
        lat = [(r[1] - r[0]) / 1e6 for r in inside]
        if not lat:
            continue
        name = "off" if s is None else f"{s[0]}/{s[1]}"
        line = (f"{name:>10} {len(lat):4d} {pct(lat, 50):6.3f} {statistics.mean(lat):6.3f} "
                f"{pct(lat, 90):6.3f} {pct(lat, 99):6.3f}")
        if s is None:
            alone_p50.append(pct(lat, 50))
            print(line)
            continue
        rows, meta = read_pacer(out)
        late, retro = lateness(rows)
        k, g = s
        # A request "met" a kernel of ours when one was running as it began.
        met = det30 = det50 = 0
        for t0, t1 in inside:
            near = [i for i, r in enumerate(rows) if t0 - (k + 50) * 1e3 <= r[1] <= t1 + 50e3]
            if any(rows[i][1] <= t0 <= rows[i][1] + k * 1e3 for i in near):
                met += 1
            lx = [max(late[i], retro[i]) for i in near]
            det30 += any(x > 30 for x in lx)
            det50 += any(x > 50 for x in lx)
        # False alarms: late kernels launched far from any request.
        starts = [r[0] for r in inside]
        fp = 0
        for i, r in enumerate(rows):
            if max(late[i], retro[i]) > 30 and not any(
                    t0 - 3e6 <= r[1] <= t1 + 3e6 for t0, t1 in reqs):
                fp += 1
        secs = (rows[-1][1] - rows[0][1]) / 1e9 if len(rows) > 1 else 1
        print(f"{line} {met / len(lat):5.2f} {det30 / len(lat):5.2f} {det50 / len(lat):5.2f} "
              f"{fp / secs:6.2f} {meta['cpu_thread_us'] / 1e4 / meta['seconds']:5.2f}")
        summary[f"with {name}"] = {"p50": pct(lat, 50), "mean": statistics.mean(lat),
                                   "p99": pct(lat, 99), "det30": det30 / len(lat),
                                   "met": met / len(lat)}
    print(f"alone p50s: {[round(x, 3) for x in alone_p50]}")

    # 4. gpufill's CPU per thread
    if os.path.exists(a.gpufill):
        print("\ngpufill CPU by thread (percent of a core):")
        conf = os.path.join(work, "gpufill.toml")
        with open(conf, "w") as f:
            f.write("[yield]\nidle_grace_s = 2.0\n")
        for label, hold in (("idle GPU", False), ("beside an idle holder", True)):
            h = None
            if hold:
                h = subprocess.Popen([sys.executable, __file__, "--worker", "holder", "30"],
                                     stdout=subprocess.PIPE, text=True)
                h.stdout.readline()
            g = subprocess.Popen([a.gpufill, "run", "--gpus", "0", "--config", conf],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"gpufill-{hold}.log"), "w"))
            time.sleep(5)
            before = threads(g.pid)
            t0 = time.monotonic()
            time.sleep(8)
            after = threads(g.pid)
            dt = time.monotonic() - t0
            g.terminate()
            g.wait()
            if h:
                h.kill()
            parts = {n: (after[n] - before.get(n, 0)) / dt * 100 for n in after}
            total = sum(parts.values())
            print(f"  {label}: total {total:.2f} %: " + ", ".join(
                f"{n} {v:.2f}" for n, v in sorted(parts.items(), key=lambda x: -x[1]) if v > 0.01))
            summary[f"gpufill {label}"] = parts
    with open(os.path.join(a.out, "live-probe.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with tarfile.open(os.path.join(a.out, "live-probe.tar.gz"), "w:gz") as t:
        t.add(work, arcname="live-probe")


def read_requests(path):
    """The service's requests from its CSV (a header, then start,end in ns a line)."""
    with open(path) as f:
        next(f)
        return [tuple(int(x) for x in line.strip().split(",")) for line in f]


def read_rows(path):
    rows, meta = [], {}
    with open(path) as f:
        head = f.readline().strip().split(",")
        for line in f:
            if line.startswith("#"):
                for kv in line[1:].split():
                    k, v = kv.split("=")
                    meta[k] = float(v)
            elif line.strip():
                rows.append(dict(zip(head, (float(x) for x in line.strip().split(",")))))
    return rows, meta


def burst_flags(rows, kernel_us, T=60.0):
    """Per burst: (ta_ns, first kernel late by a switch, kernels whose length is off by
    more than T us: preempted (ended early) or a switch between two of ours)."""
    bursts = {}
    for r in rows:
        bursts.setdefault(int(r["burst"]), []).append(r)
    out, offs = [], []
    prev_ta, c = None, 0.0
    for b in sorted(bursts):
        ks = bursts[b]
        ta = ks[0]["ta_ns"]
        if prev_ta is not None:
            c += ks[0]["ds0_us"] - (ta - prev_ta) / 1e3
        prev_ta = ta
        base = sorted(offs[-32:])[len(offs[-32:]) // 4] if offs else c
        offs.append(c)
        late = c - base
        odd = [k["i"] for k in ks if abs(k["dur_us"] - kernel_us) > T and k["i"] < len(ks) - 1]
        short_last = ks[-1]["dur_us"] < kernel_us - T
        out.append((ta, late, odd, short_last))
    return out


def inotify_watch(paths, log):
    import ctypes
    import struct
    import threading
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = libc.inotify_init1(0)
    wds = {}
    for p in paths:
        wd = libc.inotify_add_watch(fd, p.encode(), 0x20 | 0x08 | 0x10)  # OPEN, CLOSE_*
        if wd >= 0:
            wds[wd] = p
        else:
            log.append((time.monotonic(), f"watch failed {p} errno {ctypes.get_errno()}"))

    def run():
        while True:
            buf = os.read(fd, 4096)
            t = time.monotonic()
            i = 0
            while i < len(buf):
                wd, mask, _, ln = struct.unpack_from("iIII", buf, i)
                i += 16 + ln
                kind = "open" if mask & 0x20 else "close"
                log.append((t, f"{kind} {wds.get(wd)}"))
    threading.Thread(target=run, daemon=True).start()
    return wds


def signals(a, work):
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    me = os.getpid()

    def listed():
        return [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]

    # 1. A newcomer while our bursts run: inotify events, NVML listing, our signals.
    print("1. a newcomer beside bursts (2 ms kernels, 50 ms, duty 0.5)")
    log = []
    wds = inotify_watch(["/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia0"], log)
    print("   watching", sorted(wds.values()))
    out = os.path.join(work, "newcomer-burst.csv")
    pb = subprocess.Popen([BIN, "burst", "2000", "50", "0.5", "7", out])
    time.sleep(2.5)
    base = set(listed())
    t_start = time.monotonic()
    log.append((t_start, "newcomer started"))
    nc = subprocess.Popen([sys.executable, "-c",
                           "import torch,time; x=torch.zeros(1,device='cuda'); torch.cuda.synchronize();"
                           "print('ctx', time.monotonic(), flush=True); y=x+1; torch.cuda.synchronize();"
                           "print('k1', time.monotonic(), flush=True); time.sleep(1.5)"],
                          stdout=subprocess.PIPE, text=True)
    seen = None
    while time.monotonic() - t_start < 3:
        new = set(listed()) - base - {pb.pid}
        if new and seen is None:
            seen = time.monotonic()
            log.append((seen, f"NVML lists {sorted(new)}"))
        time.sleep(0.001)
    for line in nc.stdout:
        k, v = line.split()
        log.append((float(v), f"newcomer: {'context ready' if k == 'ctx' else 'first kernel done'}"))
    nc.wait()
    pb.wait()
    time.sleep(0.3)
    log.append((time.monotonic(), "nvidia-smi"))
    subprocess.run(["nvidia-smi", "-q", "-d", "UTILIZATION"], capture_output=True)
    time.sleep(0.3)
    rows, meta = read_rows(out)
    for ta, late, odd, short in burst_flags(rows, 2000):
        if late > 60 or odd or short:
            log.append((ta / 1e9, f"our burst: first kernel late {late:.0f} us, odd kernels {odd}, last short {short}"))
    for t, what in sorted(log):
        if t >= t_start - 0.1:
            print(f"   {1e3 * (t - t_start):9.1f} ms  {what}")
    print(f"   burst CPU {meta['cpu_thread_us'] / 1e4 / meta['seconds']:.2f} % of a core")

    # 2. Gaps alone: does a kernel after a long idle spell start late with nobody else?
    print("2. after an idle gap, K1's lateness against K2 (us), nobody else on the GPU")
    out = os.path.join(work, "gaps-alone.csv")
    subprocess.run([BIN, "gaps", out, "2", "0.05", "0.5", "2", "5", "12"], check=True)
    rows, _ = read_rows(out)
    by = {}
    for r in rows:
        by.setdefault(r["gap_s"], []).append(round(r["late_us"], 1))
    for g in sorted(by):
        print(f"   gap {g:6.2f} s: {by[g]}")

    # 3. The service: 1 request a second for the gaps, then 20 a second for bursts.
    t_svc = time.monotonic() + 25
    gaps_len = 45
    phases = [None, (2000, 50), None, (500, 50), None]
    until = t_svc + gaps_len + 10 * len(phases) + 1
    svc_out = os.path.join(work, "service2.csv")
    svc = subprocess.Popen([sys.executable, __file__, "--worker", "service", "--rate", "1",
                            "--rate-after", str(a.rate), "--switch-at", str(t_svc + gaps_len),
                            "--until", str(until), "--out", svc_out], stdout=subprocess.PIPE, text=True)
    svc.stdout.readline()
    time.sleep(max(0.0, t_svc - time.monotonic()))
    out = os.path.join(work, "gaps-service.csv")
    subprocess.run([BIN, "gaps", out, "3", "0.3", "1", "2", "5", "5"], check=True)
    spans = []
    for i, s in enumerate(phases):
        p0 = t_svc + gaps_len + i * 10
        time.sleep(max(0.0, p0 - time.monotonic()))
        if s is None:
            spans.append((p0, None, None))
            continue
        o = os.path.join(work, f"burst-service-{i}.csv")
        subprocess.run([BIN, "burst", str(s[0]), str(s[1]), "0.5", "9.4", o], check=True)
        spans.append((p0, s, o))
    svc.wait()
    reqs = read_requests(svc_out)
    rows, _ = read_rows(out)
    print("3a. after a gap beside a 1/s service: K1 late (us) by whether a request ran in the gap")
    prev_end = None
    hit, miss = [], []
    for r in rows:
        end = r["end_ns"]
        start = end - r["gap_s"] * 1e9 - 2e6
        had = any(start <= t0 <= end for t0, _ in reqs)
        (hit if had else miss).append(round(r["late_us"], 1))
    print(f"   with a request in the gap: {hit}")
    print(f"   without: {miss}")
    print("3b. bursts beside 20/s requests: latency (ms) and requests revealed")
    for p0, s, o in spans:
        inside = [r for r in reqs if p0 * 1e9 + 0.5e9 <= r[0] < (p0 + 9.8) * 1e9]
        lat = [(r[1] - r[0]) / 1e6 for r in inside]
        name = "off" if s is None else f"{s[0]}us"
        line = latency_line(name, 7, lat)
        if s is not None:
            brows, meta = read_rows(o)
            flags = burst_flags(brows, s[0])
            period = s[1] * 1e6
            det = 0
            for t0, t1 in inside:
                det += any((late > 60 or odd or short) and t0 <= ta <= t1 + period
                           for ta, late, odd, short in flags)
            quiet = sum(1 for ta, late, odd, short in flags if (late > 60 or odd or short) and not any(
                t0 - period <= ta <= t1 + period for t0, t1 in reqs))
            line += (f" revealed {det / max(1, len(inside)):.2f} false/s {quiet / 9.4:.2f} "
                     f"cpu {meta['cpu_thread_us'] / 1e4 / meta['seconds']:.2f} %")
        print(line)

    # 4. gpufill (HEAD) threads: CPU and wake-ups on an idle GPU.
    if os.path.exists(a.gpufill):
        g = subprocess.Popen([a.gpufill, "run", "--gpus", "0"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(4)
        b = schedstat(g.pid)
        time.sleep(8)
        e = schedstat(g.pid)
        g.terminate()
        g.wait()
        print("4. gpufill on an idle GPU, per thread: % of a core, wake-ups a second, us per wake-up")
        for k in sorted(e, key=lambda k: -(e[k][0] - b.get(k, (0, 0))[0])):
            run = e[k][0] - b.get(k, (0, 0))[0]
            n = e[k][1] - b.get(k, (0, 0))[1]
            if run > 0:
                print(f"   {k:24} {run / 8e9 * 100:6.3f} %  {n / 8:7.1f}/s  {run / max(1, n) / 1e3:7.1f} us")


def long_kernels(a, work):
    """One kernel per 50 ms burst (25 ms at duty 0.5): does a request wait for all of it
    or one time slice, and does the kernel's early exit on a clock jump show it?"""
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    # 1. A newcomer beside such bursts: inotify, NVML listing, our signals.
    print("1. a newcomer beside bursts of one 25 ms kernel every 50 ms")
    log = []
    inotify_watch(["/dev/nvidia-uvm", "/dev/nvidiactl"], log)
    out = os.path.join(work, "newcomer.csv")
    pb = subprocess.Popen([BIN, "burst", "25000", "50", "0.5", "14", out])
    time.sleep(1.0)
    base = set(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)) | {pb.pid}
    t_start = time.monotonic()
    log.append((t_start, "newcomer started"))
    nc = subprocess.Popen([sys.executable, "-c",
                           "import torch,time; print('imp', time.monotonic(), flush=True); "
                           "x=torch.zeros(1,device='cuda'); torch.cuda.synchronize();"
                           "print('ctx', time.monotonic(), flush=True); y=x+1; torch.cuda.synchronize();"
                           "print('k1', time.monotonic(), flush=True); time.sleep(1.5)"],
                          stdout=subprocess.PIPE, text=True)
    seen = None
    while time.monotonic() - t_start < 12 and seen is None:
        new = set(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)) - base
        if new:
            seen = time.monotonic()
            log.append((seen, f"NVML lists {sorted(new)}"))
        time.sleep(0.001)
    for line in nc.stdout:
        k, v = line.split()
        log.append((float(v), {"imp": "newcomer: torch imported", "ctx": "newcomer: context ready",
                               "k1": "newcomer: second kernel done"}[k]))
    nc.wait()
    pb.wait()
    rows, meta = read_rows(out)
    for ta, late, odd, short in burst_flags(rows, 25000):
        if late > 60 or short:
            log.append((ta / 1e9, f"our burst: start late {late:.0f} us, ended early {short}"))
    opens = 0
    for t, what in sorted(log):
        if t < t_start - 0.1:
            continue
        if what.startswith("open") or what.startswith("close"):
            opens += 1
            if opens > 6:
                continue
        print(f"   {1e3 * (t - t_start):9.1f} ms  {what}")
    # 2. The service at 20/s beside one 25 ms kernel per 50 ms, with and without the
    # early exit.
    phases = [None, ("25000", "20000"), None, ("25000", "1000000000"), None, ("2000", "20000"), None]
    t_svc = time.monotonic() + 25
    until = t_svc + 8 * len(phases) + 1
    svc_out = os.path.join(work, "service3.csv")
    svc = subprocess.Popen([sys.executable, __file__, "--worker", "service", "--rate", str(a.rate),
                            "--until", str(until), "--out", svc_out], stdout=subprocess.PIPE, text=True)
    svc.stdout.readline()
    spans = []
    for i, s in enumerate(phases):
        p0 = t_svc + i * 8
        time.sleep(max(0.0, p0 - time.monotonic()))
        if s is None:
            spans.append((p0, None, None))
            continue
        o = os.path.join(work, f"long-{i}.csv")
        subprocess.run([BIN, "burst", s[0], "50", "0.5", "7.4", o], check=True,
                       env=dict(os.environ, JUMP_NS=s[1]))
        spans.append((p0, s, o))
    svc.wait()
    reqs = read_requests(svc_out)
    print("2. 20/s requests beside bursts: latency (ms); bursts ended early or started late")
    for p0, s, o in spans:
        inside = [r for r in reqs if p0 * 1e9 + 0.5e9 <= r[0] < (p0 + 7.8) * 1e9]
        lat = [(r[1] - r[0]) / 1e6 for r in inside]
        name = "off" if s is None else f"{s[0]}us exit@{'off' if len(s[1]) > 8 else s[1]}"
        line = latency_line(name, 22, lat) + f" max {max(lat):.3f}"
        if s is not None:
            brows, meta = read_rows(o)
            flags = burst_flags(brows, int(s[0]))
            early = sum(1 for f in flags if f[3])
            late = sum(1 for f in flags if f[1] > 60)
            durs = sorted(r["dur_us"] for r in brows if r["i"] == 0)
            line += f" | bursts {len(flags)} early {early} late {late} dur p10 {pct(durs, 10):.0f} p50 {pct(durs, 50):.0f}"
        print(line)


def diag(a, work):
    """Why gpufill's probes and burst checks disagree with the C probe: both beside the
    same service, with gpufill's debug lines; NVML call costs with a holder present."""
    def run_gpufill(secs, log, grace=3.0):
        conf = os.path.join(work, "diag.toml")
        with open(conf, "w") as f:
            f.write(f"[yield]\nidle_grace_s = {grace}\n")
        env = dict(os.environ, NO_COLOR="1",
                   RUST_LOG="gpufill_cuda=debug,gpufill_runtime=debug,gpufill=info")
        with open(log, "w") as lf:
            g = subprocess.Popen([a.gpufill, "run", "--gpus", "0", "--config", conf],
                                 stdout=lf, stderr=lf, env=env)
            time.sleep(secs)
            g.terminate()
            g.wait()
        lines = [l for l in open(log) if "probe" in l or "timing shows" in l or "paused" in l]
        return lines
    print("1. gpufill alone on an idle GPU, 8 s: what its burst checks see")
    for l in run_gpufill(8, os.path.join(work, "diag-alone.log"))[:12]:
        print("   " + l.strip()[27:200])
    t_svc = time.monotonic() + 25
    until = t_svc + 95
    svc_out = os.path.join(work, "service-diag.csv")
    svc = subprocess.Popen([sys.executable, __file__, "--worker", "service", "--rate", "20",
                            "--rate-after", "1", "--switch-at", str(t_svc + 50),
                            "--until", str(until), "--out", svc_out], stdout=subprocess.PIPE, text=True)
    svc.stdout.readline()
    print(subprocess.run([BIN, "nvml", "2000"], capture_output=True, text=True).stdout.strip())
    time.sleep(max(0.0, t_svc - time.monotonic()))
    out = os.path.join(work, "gaps-diag.csv")
    subprocess.run([BIN, "gaps", out, "3", "0.3", "1", "2"], check=True)
    rows, _ = read_rows(out)
    print("2. the C probe pair beside 20 requests/s: K1 late (us):", [round(r["late_us"], 1) for r in rows])
    print("3. gpufill beside 20 requests/s, then 1/s (grace 3 s): its probe pairs and checks")
    lines = run_gpufill(80, os.path.join(work, "diag-service.log"))
    for l in lines[:60]:
        print("   " + l.strip()[11:200])
    svc.wait()


def threads(pid):
    """Seconds on a CPU so far, per thread."""
    return {k: run / 1e9 for k, (run, _) in schedstat(pid).items()}


if __name__ == "__main__":
    main()
