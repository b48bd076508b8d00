#!/usr/bin/env python3
"""`activity` mode on a real GPU (issue 4): a notebook-like PyTorch process holds its
context idle, then works. Runs it alone and beside `gpufill run --target 50` with
`[yield] policy = "activity", idle_grace_s = 3`, and prints the job's throughput over its
first 10 s of work and its first second, gpufill's time from the job's first kernel to
`yielding`, and whether gpufill filled beside the idle job.
Usage: python3 scripts/activity_check.py carry/gpufill [idle_s] [work_s]
"""
import datetime, os, subprocess, sys, tempfile, threading, time

JOB = r'''
import sys, time, torch
kind, idle, work = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
n = 8192 if kind == "matmul" else 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize(); time.sleep(idle)
t0 = time.time(); print(f"WORK {t0:.6f}", flush=True); it = 0; first = None
while time.time() - t0 < work:
    if kind == "matmul":
        c = a @ b
    else:
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize(); time.sleep(0.005)
    it += 1
    if first is None and time.time() - t0 >= 1.0:
        torch.cuda.synchronize(); first = it / (time.time() - t0)
torch.cuda.synchronize()
print(f"RESULT {it / (time.time() - t0):.2f} {first:.2f}", flush=True)
'''


def job(kind, idle, work):
    p = subprocess.run([sys.executable, "-c", JOB, kind, str(idle), str(work)], capture_output=True, text=True)
    lines = dict(l.split(" ", 1) for l in p.stdout.splitlines() if " " in l)
    if "RESULT" not in lines:
        raise SystemExit(p.stderr[-2000:])
    rate, first = map(float, lines["RESULT"].split())
    return float(lines["WORK"]), rate, first


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else "carry/gpufill"
    idle = float(sys.argv[2]) if len(sys.argv) > 2 else 6
    work = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write('[yield]\npolicy = "activity"\nidle_grace_s = 3.0\n')
    cfg.close()
    for kind in ["matmul", "training"]:
        _, ra, fa = job(kind, idle, work)
        g = subprocess.Popen([exe, "run", "--gpus", "0", "--target", "50", "--config", cfg.name],
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
        log = []
        threading.Thread(target=lambda: [log.append(l.rstrip()) for l in g.stderr], daemon=True).start()
        time.sleep(2)
        t_work, rs, fs = job(kind, idle, work)
        g.terminate(); g.wait()
        stamps = []
        for line in log:
            for word in ("yielding", "filling"):
                if word in line:
                    t = datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
                    stamps.append((round(t - t_work, 3), word))
        after = [t for t, w in stamps if w == "yielding" and t > 0]
        beside = any(w == "filling" and t < 0 for t, w in stamps[1:])
        print(f"{kind:9s} alone {ra:8.2f} it/s, with gpufill {rs:8.2f} it/s, ratio {rs / ra:.4f} over "
              f"{work:.0f} s of work; first second {fa:.2f} -> {fs:.2f}; yielding "
              f"{after[0] * 1000 if after else float('nan'):.0f} ms after its work began; "
              f"filled beside the idle job: {beside}; log (s from work start): {stamps}")


main()
