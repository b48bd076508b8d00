#!/usr/bin/env python3
"""gap_trace.py: what a live job's work looks like on the GPU, and where gpufill's gap
kernels fall in it (issue 40: the difference between the simulator's trainer and a real
one). Two parts, on one GPU (NVML/CUDA index `--gpu`), no MPS:

1. `profile`: torch.profiler's kernel timeline of `--steps` ResNet-18 training steps
   (the lab's `train-input` step: batch 64 at 224 px, bf16 autocast, AdamW, synchronised)
   and of GPT-2 decode requests (the lab's `decode`): per step/request its span on the GPU,
   its busy time, and the idle gaps inside it by size (> 50, 150, 500 us, 1 ms), with the
   largest and where in the step they lie.
2. `beside`: the same job running (the trainer with its `--wait-ms` input wait, or decode
   requests at 2 a second, Poisson), each step's start and end stamped (Unix us), and
   `carry/gpufill run --beside-live fill-gaps` beside it with the pacing thread's trace
   (a line per gap kernel: launch, run time, outcome, the pacer's learned spell and
   period). Says where our kernels fell: inside the job's steps or in its waits, by
   outcome; the job's rate alone and with; and the GPU's utilization.

Writes under $OUT (else /tmp/gap-trace): profile-*.json (the summaries), beside-*.log
(gpufill's log), beside-*.json (steps and kernels). Prints short tables.

  python3 scripts/gap_trace.py --gpu 0                 # both parts, trainer and decode
  OUT=DIR python3 scripts/gap_trace.py --parts report  # the tables again, from DIR's files
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job(kind, dev, new_tokens=32):
    """One step (trainer) or request (decode) of the lab's workloads."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from gpulab.live import training_step
    from gpulab.gaps import decode_request
    if kind == "train":
        return training_step("resnet18", dev, batch=64, size=224)
    return decode_request(dev, new_tokens)


def gaps_of(kernels):
    """Idle gaps between consecutive GPU ops (ts, dur in us), ops overlapping merged."""
    out, end = [], None
    for ts, dur in sorted(kernels):
        if end is not None and ts > end:
            out.append((end, ts - end))
        end = ts + dur if end is None else max(end, ts + dur)
    return out


def profile(kind, dev, steps, out):
    import torch
    from torch.profiler import ProfilerActivity, profile as prof
    run = job(kind, dev)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    path = os.path.join(out, f"profile-{kind}.trace.json")
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            run()
            torch.cuda.synchronize()
            time.sleep(0.03)
    p.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    ops = [(e["ts"], e.get("dur", 0)) for e in ev
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    os.remove(path)
    ops.sort()
    # Steps: runs of ops separated by more than 10 ms.
    groups, cur = [], []
    for ts, dur in ops:
        if cur and ts - max(t + d for t, d in cur) > 10_000:
            groups.append(cur)
            cur = []
        cur.append((ts, dur))
    if cur:
        groups.append(cur)
    rows = []
    for g in groups:
        start, end = g[0][0], max(t + d for t, d in g)
        gaps = gaps_of(g)
        busy = (end - start) - sum(d for _, d in gaps)
        big = sorted(gaps, key=lambda x: -x[1])[:6]
        rows.append({"span_us": end - start, "busy_us": busy, "kernels": len(g),
                     "gaps_over": {str(t): sum(1 for _, d in gaps if d > t)
                                   for t in (50, 150, 500, 1000)},
                     "gap_us_over_150": sum(d for _, d in gaps if d > 150),
                     "largest": [(round((s - start) / (end - start), 3), round(d)) for s, d in big]})
    json.dump(rows, open(os.path.join(out, f"profile-{kind}.json"), "w"), indent=1)
    print(f"\n{kind}: {len(rows)} steps/requests profiled")
    print(f"{'span ms':>8} {'busy ms':>8} {'ops':>5} {'>50us':>6} {'>150':>5} {'>500':>5} {'>1ms':>5} "
          f"{'idle>150 ms':>11}  largest gaps (where, us)")
    for r in rows:
        o = r["gaps_over"]
        print(f"{r['span_us']/1e3:8.2f} {r['busy_us']/1e3:8.2f} {r['kernels']:5d} {o['50']:6d} "
              f"{o['150']:5d} {o['500']:5d} {o['1000']:5d} {r['gap_us_over_150']/1e3:11.2f}  "
              f"{r['largest'][:4]}")


def beside(kind, a, dev, out):
    """The job for `a.seconds`, gpufill started after `a.alone` s; steps stamped."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from gpulab.lib import UtilTrace, handle
    run = job(kind, dev)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    rng = random.Random(7)
    stamps = []
    # NVML's own utilization samples, read once a second (the lab's one tracer).
    trace = UtilTrace(handle(a.gpu), every=1.0)
    cfg = os.path.join(out, "grace.toml")
    open(cfg, "w").write("yield.idle_grace_s = 2\n")
    env = dict(os.environ, RUST_LOG="gpufill=info,gpufill_runtime=debug,gpufill_cuda::pacing=trace",
               )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    log = open(os.path.join(out, f"beside-{kind}.log"), "w")
    t0 = time.time()
    g, g_at = None, t0 + a.alone
    nxt = time.time()
    while time.time() < t0 + a.seconds:
        if g is None and time.time() >= g_at:
            g = subprocess.Popen([a.gpufill, "run", "--gpus", str(a.gpu), "--config", cfg,
                                  "--metrics", "127.0.0.1:0"] + a.gpufill_args.split(),
                                 stdout=log, stderr=log, env=env)
        if kind == "decode":
            nxt += rng.expovariate(2.0)
            time.sleep(max(0.0, nxt - time.time()))
        s = time.time()
        run()
        torch.cuda.synchronize()
        e = time.time()
        stamps.append((s, e))
        if kind == "train":
            time.sleep(a.wait_ms / 1e3)
    if g:
        g.terminate()
        g.wait(10)
    util = trace.finish()
    log.close()
    kernels = []
    for line in open(os.path.join(out, f"beside-{kind}.log")):
        if "gap kernel" not in line:
            continue
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        try:
            kernels.append((int(f["launched_unix_us"]) / 1e6, int(f["ran_us"]), f["outcome"],
                            int(f["spell_us"]), int(f["period_us"]), int(f.get("kernel_us", 0)),
                            int(f.get("hold_us", 0)), int(f.get("met", 0))))
        except (KeyError, ValueError):
            pass
    json.dump({"steps": stamps, "kernels": kernels, "util": util, "t0": t0, "g_at": g_at,
               "seconds": a.seconds},
              open(os.path.join(out, f"beside-{kind}.json"), "w"))
    report(kind, out)


def report(kind, out):
    """The tables of `beside`, from its beside-KIND.json (and log) under `out`."""
    d = json.load(open(os.path.join(out, f"beside-{kind}.json")))
    stamps, kernels, util = d["steps"], d["kernels"], d["util"]
    # Files written before t0 and g_at were kept: the defaults (6 s alone).
    t0 = d.get("t0", stamps[0][0] - 0.05)
    g_at = d.get("g_at", t0 + 6.0)
    seconds = d.get("seconds", stamps[-1][1] - t0)
    split = g_at + 3.0  # gpufill's grace and start-up
    alone = [x for x in stamps if t0 + 1 < x[0] < g_at]
    withg = [x for x in stamps if x[0] > split]
    dur = lambda xs: statistics.median([e - s for s, e in xs]) * 1e3 if xs else float("nan")
    rate = lambda xs: (len(xs) - 1) / (xs[-1][0] - xs[0][0]) if len(xs) > 1 else float("nan")
    u = lambda lo, hi: statistics.mean([v for t, v in util if lo < t < hi] or [float("nan")])
    print(f"\n{kind} beside gpufill: step/request median {dur(alone):.2f} ms alone, "
          f"{dur(withg):.2f} ms with; rate {rate(alone):.2f} -> {rate(withg):.2f} /s; "
          f"GPU {u(t0 + 1, g_at):.1f} -> {u(split, t0 + seconds):.1f} %")
    # Where our kernels fell: inside a step (from its start to its end) or outside.
    import bisect
    starts = [s for s, _ in stamps]
    where = {}
    for at, ran, outcome, spell, period, kernel_us, *_ in kernels:
        if at < split:
            continue
        i = bisect.bisect_right(starts, at) - 1
        inside = i >= 0 and at <= stamps[i][1]
        frac = (at - stamps[i][0]) / max(1e-9, stamps[i][1] - stamps[i][0]) if inside else None
        # Stretched kernels (longer than the shortest gap kernel, 100 us) counted apart.
        long = " stretched" if kernel_us > 100 else ""
        key = ("in step" if inside else "between") + " " + outcome + long
        where.setdefault(key, []).append(frac)
    n = sum(len(v) for v in where.values())
    steps_with = len(withg)
    print(f"our kernels after start-up: {n} ({n / max(1, steps_with):.1f} a step)")
    for k in sorted(where):
        v = where[k]
        fr = [x for x in v if x is not None]
        pos = f", where in the step p10/p50/p90 {statistics.quantiles(fr, n=10)[0]:.2f}/" \
              f"{statistics.median(fr):.2f}/{statistics.quantiles(fr, n=10)[-1]:.2f}" if len(fr) > 10 else ""
        print(f"  {k:24s} {len(v):6d} ({len(v) / max(1, steps_with):.2f} a step){pos}")
    late = [k for k in kernels if k[0] > split]
    if late:
        print(f"  learned at the end: spell {late[-1][3]} us, period {late[-1][4]} us")
        span = max(1e-9, late[-1][0] - late[0][0])
        asked = sum(k[5] for k in late) / 1e6
        met = sum(k[7] for k in late)
        q = lambda xs, i: statistics.quantiles(xs, n=10)[i] if len(xs) > 1 else (xs or [0])[0]
        holds = [k[6] / 1e3 for k in late]
        periods = [k[4] / 1e3 for k in late]
        spells = [k[3] / 1e3 for k in late]
        print(f"  our kernels asked {100 * asked / span:.1f} % of the time; met (charged) "
              f"{met / max(1, steps_with):.2f} a step; stretched {sum(k[5] > 100 for k in late)}")
        print(f"  hold ms p10/p50/p90 {q(holds, 0):.1f}/{statistics.median(holds):.1f}/{q(holds, -1):.1f}; "
              f"period ms {q(periods, 0):.1f}/{statistics.median(periods):.1f}/{q(periods, -1):.1f}; "
              f"spell ms {q(spells, 0):.1f}/{statistics.median(spells):.1f}/{q(spells, -1):.1f}")
        # Each second: our kernels' share asked, the hold and the period at its end.
        sec = {}
        for k in late:
            sec.setdefault(int(k[0] - late[0][0]), []).append(k)
        print("  by second (s: ours %, met, hold ms, period ms, spell ms):")
        print("   " + "; ".join(f"{s}: {sum(k[5] for k in v) / 1e4:.0f} {sum(k[7] for k in v)} "
                                 f"{v[-1][6] / 1e3:.0f} {v[-1][4] / 1e3:.1f} {v[-1][3] / 1e3:.1f}"
                                 for s, v in sorted(sec.items())))
    holds = [l.strip()[:160] for l in open(os.path.join(out, f"beside-{kind}.log"))
             if "gap kernel" not in l and ("cost" in l or "hold" in l)]
    for l in holds[:12]:
        print("  log:", l)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=22.0)
    ap.add_argument("--alone", type=float, default=6.0)
    ap.add_argument("--wait-ms", type=float, default=25.0)
    ap.add_argument("--parts", default="profile,beside")
    ap.add_argument("--jobs", default="train,decode")
    ap.add_argument("--gpufill", default=os.path.join(ROOT, "carry", "gpufill"))
    ap.add_argument("--gpufill-args", default="--beside-live fill-gaps")
    a = ap.parse_args()
    out = os.environ.get("OUT") or "/tmp/gap-trace"
    os.makedirs(out, exist_ok=True)
    os.environ["CUDA_VISIBLE_DEVICES"] = str(a.gpu)
    dev = "cuda:0"
    for kind in a.jobs.split(","):
        if "profile" in a.parts:
            profile(kind, dev, a.steps, out)
    for kind in a.jobs.split(","):
        if "beside" in a.parts:
            beside(kind, a, dev, out)
        elif "report" in a.parts:
            report(kind, out)


if __name__ == "__main__":
    main()
