#!/usr/bin/env python3
"""Yield latency and context release on a real GPU (issue 4).

Starts `gpufill run --gpus 0 --target 50` with yield.release_context (after 2 s) and a
2 s grace, then a foreign Python process that creates a CUDA context (through PyTorch),
idles 6 s and exits. Polls NVML's compute-process list every ~1 ms to timestamp when the
foreign PID appears, and reads gpufill's log for its `yielding` line. Prints: appearance
-> yielding (ms), whether gpufill's PID left NVML's list while yielding (context released),
and utilization after it came back. Usage: python3 scripts/yield_check.py carry/gpufill
"""
import datetime, os, subprocess, sys, tempfile, threading, time
import pynvml as N

exe = sys.argv[1] if len(sys.argv) > 1 else "carry/gpufill"
cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
cfg.write("[yield]\ngrace_s = 2.0\nrelease_context = true\nrelease_after_s = 2.0\n")
cfg.close()
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
g = subprocess.Popen([exe, "run", "--gpus", "0", "--target", "50", "--config", cfg.name],
                     stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
log = []
threading.Thread(target=lambda: [log.append((time.time(), l.rstrip())) for l in g.stderr], daemon=True).start()
time.sleep(3)
pids = lambda: {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h)}
ours = set(pids())
print("gpufill's NVML entries before the job:", pids())
job = subprocess.Popen([sys.executable, "-c",
                        "import torch,time; torch.zeros(1,device='cuda'); time.sleep(6)"])
appeared, trace = None, []
t_end = time.time() + 20
while time.time() < t_end:
    now = time.time(); cur = pids()
    if appeared is None and set(cur) - ours:
        appeared = now
    trace.append((now, cur))
    time.sleep(0.001 if appeared is None else 0.1)
job.wait()
util = [N.nvmlDeviceGetUtilizationRates(h).gpu for _ in range(5) if not time.sleep(0.2)]
g.terminate(); g.wait()


def log_time(word):
    for _, line in log:
        if word in line:
            stamp = line.split()[0]
            return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


y = log_time("yielding")
print(f"foreign PID appeared in NVML at +{appeared - trace[0][0]:.3f} s; gpufill logged yielding "
      f"{1000 * (y - appeared):.1f} ms after that" if appeared and y else f"appeared={appeared} yield={y}")
released = [t for t, cur in trace if not (set(cur) & ours)]
print("gpufill absent from NVML's list while yielding:", bool(released),
      f"(from +{released[0] - appeared:.2f} s after the job appeared)" if released else "")
print("after the job left and the grace: NVML entries", pids() if False else trace[-1][1], "util samples", util)
for t, line in log:
    if any(w in line for w in ("yielding", "released", "opening", "filling", "GPU idle")):
        print(f"  {t - trace[0][0]:7.3f} {line[line.find('gpu{'):]}")
