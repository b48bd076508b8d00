"""The metrics endpoint on a real GPU: `metrics`, `sm-reload` and `sample`.

`metrics`: the endpoint and SIGHUP reload (issue 5).

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
About 45 s. Usage: python3 scripts/lab.py metrics carry/gpufill

`sm-reload`: a SIGHUP reload under `metric = "sm"`: the new target is held as SM
activity (the loop keeps its SM shaping), and a changed `load.kernel` is refused as
restart-only. Starts `gpufill run --gpus 0 --config F --metrics 127.0.0.1:0` with
`metric = "sm"` and target 30, reads `gpufill_sm_activity_percent` and
`gpufill_width_blocks` from the endpoint after 4 s, rewrites F with target 50 (and
`kernel = "spin"`), sends SIGHUP, and reads them again 4 s later. Prints one line per
phase and the reload's log lines. About 15 s, one GPU:

    python3 scripts/lab.py sm-reload carry/gpufill

`sample URL`: one scrape of a running gpufill as a JSON line: the MPS state, the state
of its (first) GPU, duty, utilization, yields, foreign processes, worker_up; {"up":
false} when the endpoint does not answer (scripts/mps_follow_check.sh's probe).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .lib import (N, Gpufill, UtilTrace, cpu_seconds, fetch, flat, handle, out_dir, parse_metrics,
                  parser, pids_on, proc_mem_mib, scrape, state_of)


def until(url, pred, timeout=10):
    """(seconds until a scrape satisfies `pred`, that scrape); (None, the last) at timeout."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = scrape(url, timeout=2)
        if pred(v):
            return time.time() - t0, v
        time.sleep(0.05)
    return None, scrape(url, timeout=2)


def metrics(argv):
    ap = parser("metrics", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    exe = ap.parse_args(argv).gpufill
    out = out_dir("metrics-out")
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write("target_percent = 50\n")
    cfg.close()
    h = handle(0)
    g = Gpufill(exe, ["--gpus", "0", "--config", cfg.name], port=0,
                log_path=os.path.join(out, "gpufill.log"))
    url = g.url(15)
    res = {"url": url}
    until(url, lambda v: v.get("gpufill_state.filling") == 1.0 and "gpufill_memory_used_bytes" in v)
    time.sleep(3)
    res["A"] = against_nvml(url, h, out)
    res["B"] = scrape_cost(url, g.pid)
    res["C"] = reload_target(url, h, g, cfg.name)
    # D. broken file.
    with open(cfg.name, "w") as f:
        f.write("target_percent = 20\n[load]\nwidth_blocks = 0\n")
    g.signal(signal.SIGHUP)
    err = g.wait_for("reload refused", 5) and g.first("reload refused")
    time.sleep(0.5)
    res["D"] = {"error_line": err, "target_after": scrape(url).get("gpufill_target_percent")}
    res["E"] = foreign_job(url)
    res["exit_code"], _ = g.stop()
    os.unlink(cfg.name)
    with open(os.path.join(out, "metrics_check.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(f"{'check':<34} value")
    for part in "ABCDE":
        for k, val in res[part].items():
            print(f"{part}. {k:<31} {val if not isinstance(val, float) else round(val, 3)}")
    print(f"exit code {res['exit_code']}")


def against_nvml(url, h, out):
    """A. values against NVML."""
    _, text, _ = fetch(url, timeout=2)
    with open(os.path.join(out, "metrics_sample.txt"), "w") as f:
        f.write(text)
    v = flat(parse_metrics(text))
    return {"memory_metric_mib": v.get("gpufill_memory_used_bytes", 0) / 2**20,
            "memory_nvml_mib": sum(proc_mem_mib(h, p) or 0 for p in pids_on(h)),
            "power_metric_w": v.get("gpufill_power_watts"),
            "power_nvml_w": N.nvmlDeviceGetPowerUsage(h) / 1000,
            "util_metric": v.get("gpufill_utilization_percent"),
            "util_nvml": N.nvmlDeviceGetUtilizationRates(h).gpu,
            "target": v.get("gpufill_target_percent"), "duty": v.get("gpufill_duty_ratio")}


def scrape_cost(url, pid):
    """B. CPU with and without scraping."""
    c0 = cpu_seconds(pid)
    time.sleep(5)
    c1 = cpu_seconds(pid)
    end = time.time() + 5
    while time.time() < end:
        scrape(url, timeout=2)
        time.sleep(0.1)
    c2 = cpu_seconds(pid)
    return {"cpu_pct_unscraped": 100 * (c1 - c0) / 5, "cpu_pct_scraped_10hz": 100 * (c2 - c1) / 5}


def reload_target(url, h, g, cfg):
    """C. SIGHUP to target 30: when the endpoint and NVML show it, and the same context."""
    pids_before = sorted(pids_on(h))
    with open(cfg, "w") as f:
        f.write("target_percent = 30\n")
    t_hup = time.time()
    trace = UtilTrace(h, since=t_hup)
    g.signal(signal.SIGHUP)
    seen, _ = until(url, lambda v: v.get("gpufill_target_percent") == 30.0)
    held = None
    while time.time() - t_hup < 10 and held is None:
        trace.read()
        tail = trace.samples
        if len(tail) >= 3 and all(abs(val - 30) <= 2 for _, val in tail[-3:]):
            held = tail[-3][0] - t_hup
        time.sleep(0.2)
    return {"endpoint_shows_30_after_s": seen, "nvml_holds_30_after_s": held,
            "same_context": sorted(pids_on(h)) == pids_before,
            "reload_logged": g.wait_for("config reloaded", 1) is not None,
            "no_new_context": g.first("opening a new CUDA context") is None}


def foreign_job(url):
    """E. a foreign job for 3 s: yielding, yields_total +1, foreign >= 1."""
    y0 = scrape(url).get("gpufill_yields_total", 0)
    job = subprocess.Popen([sys.executable, "-c",
                            "import torch,time; torch.zeros(1,device='cuda'); time.sleep(3)"])
    t_y, v = until(url, lambda v: v.get("gpufill_state.yielding") == 1.0, 20)
    job.wait()
    return {"yielding_seen_after_s": t_y, "foreign": v.get("gpufill_foreign_processes"),
            "yields_delta": v.get("gpufill_yields_total", 0) - y0}


def sm_reload(argv):
    ap = parser("sm-reload", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    exe = ap.parse_args(argv).gpufill
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write('metric = "sm"\ntarget_percent = 30\n')
    cfg.close()
    g = Gpufill(exe, ["--gpus", "0", "--config", cfg.name], port=0)
    url = g.url(30)
    if url is None or g.wait_for("filling", 30) is None:
        print("gpufill did not start:", *[line for _, line in g.poll_log()[-5:]], sep="\n")
        g.stop()
        return 1
    time.sleep(4)
    before = scrape(url, timeout=2)
    with open(cfg.name, "w") as f:
        f.write('metric = "sm"\ntarget_percent = 50\n[load]\nkernel = "spin"\n')
    sent = time.time()
    g.signal(signal.SIGHUP)
    time.sleep(4)
    after = scrape(url, timeout=2)
    g.stop()
    os.unlink(cfg.name)
    for name, v in (("before (target 30)", before), ("after SIGHUP (target 50)", after)):
        print(f"{name:26} target {v.get('gpufill_target_percent')} "
              f"sm_activity {v.get('gpufill_sm_activity_percent')} "
              f"width {v.get('gpufill_width_blocks')} duty {v.get('gpufill_duty_ratio')} "
              f"utilization series present: {'gpufill_utilization_percent' in v}")
    for t, line in g.lines:
        if t is not None and t >= sent and ("reload" in line or "restart" in line):
            print(f"  +{t - sent:.3f} s {line}")


def sample(argv):
    ap = parser("sample", __doc__)
    ap.add_argument("url", help="the metrics address: http://HOST:PORT[/metrics], or a port")
    a = ap.parse_args(argv)
    m = scrape(a.url)
    if not m:
        print(json.dumps({"t": time.time(), "up": False}))
        return 0
    mps = [s for s in ("client", "none", "left") if m.get(f"gpufill_mps.{s}") == 1]
    print(json.dumps({"t": time.time(), "up": True, "mps": (mps or [None])[0],
                      "state": (state_of(m) or [None])[0],
                      "duty": m.get("gpufill_duty_ratio"),
                      "util": m.get("gpufill_utilization_percent"),
                      "yields": m.get("gpufill_yields_total"),
                      "foreign": m.get("gpufill_foreign_processes"),
                      "worker_up": m.get("gpufill_worker_up")}))
    return 0
