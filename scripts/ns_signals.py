#!/usr/bin/env python3
"""What NVML shows from inside a PID namespace of its own, and when (issue 14's fact finding).

Runs `gpufill run` inside `unshare --pid --fork --mount-proc` beside an NVML observer in the
same namespace, and a second observer outside it (the host's view). A PyTorch newcomer is
started outside: it creates its context, holds it idle, then runs light work, then exits.
Every observer samples every 10 ms and writes JSON lines; the job logs its own milestones.
The summary prints, for each signal, its time relative to the job's process start.
Usage: python3 scripts/ns_signals.py --gpufill carry/gpufill --out $OUT
"""
import argparse, json, os, subprocess, sys, time

OBSERVER = r'''
import json, os, sys, time, pynvml as N
N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
out = open(sys.argv[1], "w"); end = time.time() + float(sys.argv[2]); last_pp = 0
def nslink():
    try: return os.readlink("/proc/self/ns/pid")
    except OSError as e: return str(e)
nspid = [l for l in open("/proc/self/status") if l.startswith("NSpid")]
out.write(json.dumps({"self": os.getpid(), "ns": nslink(), "nspid": nspid}) + "\n")
while time.time() < end:
    r = {"t": time.time()}
    m1 = N.nvmlDeviceGetMemoryInfo(h); r["used_v1"] = m1.used >> 20
    try:
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2); r["used_v2"] = m2.used >> 20; r["reserved_v2"] = m2.reserved >> 20
    except Exception as e: r["v2"] = str(e)
    r["procs"] = [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
    try: r["mps"] = [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in N.nvmlDeviceGetMPSComputeRunningProcesses(h)]
    except Exception as e: r["mps"] = str(e)
    r["util"] = N.nvmlDeviceGetUtilizationRates(h).gpu
    try:
        s = N.nvmlDeviceGetProcessUtilization(h, last_pp)
        r["pp"] = [(x.pid, x.smUtil, x.timeStamp) for x in s]
        if s: last_pp = max(x.timeStamp for x in s)
    except N.NVMLError as e: r["pp"] = []
    out.write(json.dumps(r) + "\n"); time.sleep(0.01)
'''

JOB = r'''
import sys, time
def mark(k): print(f"MARK {k} {time.time():.4f}", flush=True)
mark("start")
import torch
mark("imported")
torch.cuda.init(); x = torch.zeros(1, device="cuda"); torch.cuda.synchronize()
mark("context_ready")
time.sleep(3.0)                       # an idle holder
mark("work_begins")
a = torch.randn(2048, 2048, device="cuda")
t = time.time()
while time.time() - t < 3.0:          # light: ~20 % busy
    for _ in range(4): a @ a
    torch.cuda.synchronize(); time.sleep(0.02)
mark("work_ends")
time.sleep(1.0)
mark("exit")
'''

def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--gpufill", required=True); ap.add_argument("--out", default="/tmp/ns")
    a = ap.parse_args(); os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="gpufill=debug")
    dur = 22
    inner = (f"{a.gpufill} run --gpus 0 --target 50 --duration {dur} 2>{a.out}/gpufill.log & "
             f"{sys.executable} -c '{OBSERVER}' {a.out}/inside.jsonl {dur}; wait")
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", inner], env=env)
    host = subprocess.Popen([sys.executable, "-c", OBSERVER, f"{a.out}/outside.jsonl", str(dur)])
    time.sleep(5)
    job = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True)
    marks = {l.split()[1]: float(l.split()[2]) for l in job.stdout.splitlines() if l.startswith("MARK")}
    ns.wait(); host.wait()
    json.dump(marks, open(f"{a.out}/marks.json", "w"))
    t0 = marks["start"]
    print("job marks (s from start):", {k: round(v - t0, 3) for k, v in marks.items()})
    for view in ("inside", "outside"):
        rows = [json.loads(l) for l in open(f"{a.out}/{view}.jsonl")]
        head, rows = rows[0], rows[1:]
        print(f"--- {view}: {head}")
        pre = [r for r in rows if r["t"] < t0]
        base = {k: (min(r[k] for r in pre) if pre and k in pre[0] else None) for k in ("used_v1", "used_v2")}
        print("   baseline before job:", base, "procs:", pre[-1]["procs"] if pre else None, "util:", pre[-1]["util"] if pre else None)
        def first(cond):
            for r in rows:
                if r["t"] >= t0 and cond(r): return round(r["t"] - t0, 3)
        own = set(p for p, _ in (pre[-1]["procs"] if pre else []))
        print("   first listed new proc:", first(lambda r: any(p not in own for p, _ in r["procs"])))
        for k in ("used_v1", "used_v2"):
            if base[k] is not None:
                for thr in (16, 64, 128):
                    print(f"   {k} > base+{thr}:", first(lambda r, k=k, thr=thr: r.get(k, 0) > base[k] + thr))
        pp_pre = set(p for r in pre for p, _, _ in r["pp"])
        print("   per-process pids before job:", sorted(pp_pre))
        print("   first pp sample from a new pid:", first(lambda r: any(p not in pp_pre for p, _, _ in r["pp"])))
        print("   util >= 60 first:", first(lambda r: r["util"] >= 60))
        mem = [(round(r["t"] - t0, 2), r.get("used_v1"), r.get("used_v2"), r["util"], r["procs"], [(p, s) for p, s, _ in r["pp"]]) for r in rows[::25]]
        for m in mem: print("   ", m)
    print(open(f"{a.out}/gpufill.log").read()[-3000:])

if __name__ == "__main__":
    main()
