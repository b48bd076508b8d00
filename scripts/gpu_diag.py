#!/usr/bin/env python3
"""Diagnose one `gpufill run`: per-thread CPU, and the samples the loop saw (debug log)
against NVML's sample buffer. Usage: python3 scripts/gpu_diag.py carry/gpufill SECS [flags...]"""
import os, re, subprocess, sys, time, threading
import pynvml as N

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import task_cpu_seconds  # noqa: E402



def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            out[f"{comm}/{tid}"] = task_cpu_seconds(f"{pid}/task/{tid}")
        except OSError:
            pass
    return out


def safe(f):
    try:
        return f()
    except N.NVMLError:
        return None


def main():
    exe, secs, flags = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    env = dict(os.environ, RUST_LOG="debug", NO_COLOR="1")
    t0 = time.time()
    p = subprocess.Popen([exe, "run", "--gpus", "0"] + flags, stderr=subprocess.PIPE, text=True, env=env)
    seen = []

    def rd():
        for line in p.stderr:
            m = re.search(r"util=([\d.]+).*duty=([\d.]+)", line)
            if m and " sample" in line:
                seen.append((time.time() - t0, float(m.group(1)), float(m.group(2))))
            elif "DEBUG" not in line:
                print(f"{time.time()-t0:7.3f} {line.rstrip()}")

    threading.Thread(target=rd, daemon=True).start()
    time.sleep(2)
    a, ta = threads(p.pid), time.time()
    time.sleep(secs)
    b, tb = threads(p.pid), time.time()
    # NVML call costs (pynvml, so Python overhead is included) while our context exists.
    last = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0)[1][-1].timeStamp
    calls = {
        "compute_processes": lambda: N.nvmlDeviceGetComputeRunningProcesses(h),
        "utilization_rates": lambda: N.nvmlDeviceGetUtilizationRates(h),
        "samples(last_seen)": lambda: safe(lambda: N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last)),
        "samples(0)": lambda: N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0),
    }
    for name, f in calls.items():
        t = time.perf_counter()
        for _ in range(100):
            f()
        print(f"cost {name:22s} {1e4 * (time.perf_counter() - t):8.1f} us")
    _, s = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0)
    nv = [(x.timeStamp / 1e6 - t0, x.sampleValue.uiVal) for x in s if x.timeStamp / 1e6 > t0 + 2]
    p.terminate()
    p.wait()
    print("per-thread CPU, % of a core:")
    for k in sorted(b):
        print(f"  {k:28s} {100 * (b[k] - a.get(k, 0)) / (tb - ta):6.2f}")
    print("total", round(100 * (sum(b.values()) - sum(a.values())) / (tb - ta), 2))
    print("loop saw (t, util, duty):", [(round(t, 2), u, d) for t, u, d in seen if t > 2][:25])
    print("nvml samples (t, util):", [(round(t, 2), v) for t, v in nv][:25])


if __name__ == "__main__":
    main()
