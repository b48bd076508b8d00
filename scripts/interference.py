#!/usr/bin/env python3
"""What gpufill costs a foreign PyTorch job (issue 4's benchmark, presence mode, no MPS).

For each job kind, runs the job alone, then again while `gpufill run --target 50` fills,
alternating, `--repeats` times; prints the median throughput ratio, the job's first-second
throughput, and gpufill's time from the job's process start to its `yielding` log line.
Usage: python3 scripts/interference.py --gpufill carry/gpufill [--seconds 8] [--repeats 2]
"""
import argparse, json, os, statistics, subprocess, sys, threading, time

UTIL = None

JOB = r'''
import sys, time, torch
kind, seconds = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda")
n = 8192 if kind == "matmul" else 4096
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16); b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.time(); it = 0; first = None
while time.time() - t0 < seconds:
    if kind == "matmul":
        c = a @ b
    else:                      # training-like: a burst of matmuls, then a host gap
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize(); time.sleep(0.005)
    it += 1
    if first is None and time.time() - t0 >= 1.0:
        torch.cuda.synchronize(); first = it / (time.time() - t0)
torch.cuda.synchronize()
print(f"RESULT {it / (time.time() - t0):.2f} {first or 0:.2f}", flush=True)
'''


def run_job(kind, seconds):
    t = time.time()
    p = subprocess.run([sys.executable, "-c", JOB, kind, str(seconds)], capture_output=True, text=True)
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
    if not line:
        raise SystemExit(p.stderr[-2000:])
    rate, first = map(float, line[0].split()[1:])
    return t, rate, first


def with_gpufill(args, kind):
    g = subprocess.Popen([args.gpufill, "run", "--gpus", "0", "--target", "50"],
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
    marks = []
    threading.Thread(target=lambda: [marks.append((time.time(), l)) for l in g.stderr], daemon=True).start()
    time.sleep(3)
    utils, done = [], []

    def poll():
        import pynvml as N
        N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
        while not done:
            utils.append(N.nvmlDeviceGetUtilizationRates(h).gpu); time.sleep(0.1)
    threading.Thread(target=poll, daemon=True).start()
    start, rate, first = run_job(kind, args.seconds)
    done.append(1)
    g.terminate(); g.wait()
    # Drop the job's start-up (torch import, context) from the utilization summary.
    global UTIL
    UTIL = statistics.median(utils[len(utils) // 3:]) if utils else None
    yields = [t - start for t, l in marks if "yielding" in l and t >= start]
    fills_before = any("filling" in l for t, l in marks if t < start)
    return rate, first, (yields[0] if yields else None), fills_before, [l.strip() for _, l in marks][-6:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpufill", default="carry/gpufill")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    out = {}
    for kind in ["matmul", "training"]:
        alone, shared = [], []
        for _ in range(args.repeats):
            alone.append(run_job(kind, args.seconds)[1:])
            shared.append(with_gpufill(args, kind))
        ra = statistics.median(r for r, _ in alone); rs = statistics.median(r for r, *_ in shared)
        fa = statistics.median(f for _, f in alone); fs = statistics.median(s[1] for s in shared)
        out[kind] = {"alone": alone, "with_gpufill": shared}
        print(f"{kind:9s} alone {ra:9.2f} it/s  with gpufill {rs:9.2f} it/s  ratio {rs / ra:.4f}  "
              f"first second {fa:.2f} -> {fs:.2f}  yield after job start (s): {[s[2] for s in shared]}  "
              f"filled before job: {[s[3] for s in shared]}  median util during job (last 2/3): {UTIL}")
    with open(os.path.join(os.environ.get("OUT", "."), "interference.json"), "w") as f:
        json.dump(out, f, indent=1)


main()
