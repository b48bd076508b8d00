#!/usr/bin/env python3
"""The metrics endpoint and SIGHUP reload on a real GPU (issue 5).

Starts `gpufill run --gpus 0 --config F --metrics 127.0.0.1:0` (target 50), finds the
port in its log, and checks, scraping /metrics:
  A. values against NVML read here: gpufill_memory_used_bytes vs the process's
     usedGpuMemory, gpufill_power_watts vs board power, utilization vs NVML samples;
  B. CPU cost of scraping: gpufill's CPU over 5 s scraped at 10 Hz vs 5 s unscraped;
  C. SIGHUP with target 30: time until the endpoint shows 30 and until NVML's samples
     hold 30 +- 2; the same CUDA context (gpufill's NVML PID and memory unchanged);
  D. SIGHUP with a broken file: the error line, target still 30;
  E. a foreign PyTorch process for 3 s: state yielding, yields_total +1, foreign >= 1.
Writes $OUT/metrics_check.json and $OUT/metrics_sample.txt (one scrape); prints a table.
About 45 s. Usage: python3 scripts/metrics_check.py carry/gpufill
"""
import json, os, re, signal, subprocess, sys, tempfile, threading, time, urllib.request
import pynvml as N

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import cpu_seconds, proc_mem_mib, samples_since  # noqa: E402

exe = sys.argv[1] if len(sys.argv) > 1 else "carry/gpufill"
out_dir = os.environ.get("OUT", "metrics-out")
os.makedirs(out_dir, exist_ok=True)
cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
cfg.write("target_percent = 50\n")
cfg.close()
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
g = subprocess.Popen([exe, "run", "--gpus", "0", "--config", cfg.name, "--metrics", "127.0.0.1:0"],
                     stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
log = []
threading.Thread(target=lambda: [log.append(l.rstrip()) for l in g.stderr], daemon=True).start()


def wait_log(word, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        hit = [l for l in log if word in l]
        if hit:
            return hit[0]
        time.sleep(0.05)
    return None


line = wait_log("metrics listening on http://")
port = int(re.search(r"http://[^ ]*:(\d+)/metrics", line).group(1)) if line else None
url = f"http://127.0.0.1:{port}/metrics"


def scrape():
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    vals = {}
    for l in text.splitlines():
        m = re.match(r'(\w+)\{([^}]*)\} (\S+)$', l)
        if m:
            state = re.search(r'state="(\w+)"', m.group(2))
            key = m.group(1) + (f"[{state.group(1)}]" if state else "")
            vals[key] = float(m.group(3))
    return text, vals


def until(pred, timeout=10):
    t0 = time.time()
    while time.time() - t0 < timeout:
        _, v = scrape()
        if pred(v):
            return time.time() - t0, v
        time.sleep(0.05)
    return None, scrape()[1]


res = {"port": port}
_, v = until(lambda v: v.get("gpufill_state[filling]") == 1.0 and "gpufill_memory_used_bytes" in v)
time.sleep(3)
# A. values against NVML.
text, v = scrape()
open(os.path.join(out_dir, "metrics_sample.txt"), "w").write(text)
pids = [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
res["A"] = {"memory_metric_mib": v.get("gpufill_memory_used_bytes", 0) / 2**20,
            "memory_nvml_mib": sum(proc_mem_mib(h, p) or 0 for p in pids),
            "power_metric_w": v.get("gpufill_power_watts"),
            "power_nvml_w": N.nvmlDeviceGetPowerUsage(h) / 1000,
            "util_metric": v.get("gpufill_utilization_percent"),
            "util_nvml": N.nvmlDeviceGetUtilizationRates(h).gpu,
            "target": v.get("gpufill_target_percent"), "duty": v.get("gpufill_duty_ratio")}
# B. CPU with and without scraping.
c0 = cpu_seconds(g.pid); time.sleep(5); c1 = cpu_seconds(g.pid)
end = time.time() + 5
while time.time() < end:
    scrape(); time.sleep(0.1)
c2 = cpu_seconds(g.pid)
res["B"] = {"cpu_pct_unscraped": 100 * (c1 - c0) / 5, "cpu_pct_scraped_10hz": 100 * (c2 - c1) / 5}
# C. SIGHUP to target 30.
pids_before = sorted(pids)
open(cfg.name, "w").write("target_percent = 30\n")
t_hup = time.time()
g.send_signal(signal.SIGHUP)
seen, _ = until(lambda v: v.get("gpufill_target_percent") == 30.0)
last_ts = int(t_hup * 1e6)
held = None
tail = []
while time.time() - t_hup < 10 and held is None:
    s = samples_since(h, last_ts)
    if s:
        last_ts = int(s[-1][0] * 1e6)
        tail += [x for x in s if x[0] >= t_hup]
        if len(tail) >= 3 and all(abs(val - 30) <= 2 for _, val in tail[-3:]):
            held = tail[-3][0] - t_hup
    time.sleep(0.2)
res["C"] = {"endpoint_shows_30_after_s": seen, "nvml_holds_30_after_s": held,
            "same_context": sorted(p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)) == pids_before,
            "reload_logged": bool(wait_log("config reloaded", 1)),
            "no_new_context": not any("opening a new CUDA context" in l for l in log)}
# D. broken file.
open(cfg.name, "w").write("target_percent = 20\n[load]\nwidth_blocks = 0\n")
g.send_signal(signal.SIGHUP)
err = wait_log("reload refused", 5)
time.sleep(0.5)
res["D"] = {"error_line": err, "target_after": scrape()[1].get("gpufill_target_percent")}
# E. a foreign job.
y0 = scrape()[1].get("gpufill_yields_total", 0)
job = subprocess.Popen([sys.executable, "-c", "import torch,time; torch.zeros(1,device='cuda'); time.sleep(3)"])
t_y, v = until(lambda v: v.get("gpufill_state[yielding]") == 1.0, 20)
res["E"] = {"yielding_seen_after_s": t_y, "foreign": v.get("gpufill_foreign_processes"),
            "yields_delta": v.get("gpufill_yields_total", 0) - y0}
job.wait()
g.send_signal(signal.SIGTERM); g.wait(timeout=10)
res["exit_code"] = g.returncode
json.dump(res, open(os.path.join(out_dir, "metrics_check.json"), "w"), indent=2)
print(f"{'check':<34} value")
for part in "ABCDE":
    for k, val in res[part].items():
        print(f"{part}. {k:<31} {val if not isinstance(val, float) else round(val, 3)}")
print(f"exit code {g.returncode}")
N.nvmlShutdown()
