"""`multi-gpu`, issue 25: the runtime's agent on every GPU of one host, on the GPU machine.

Part 1, `gpufill run` at the defaults (every GPU, target 50, `activity` policy), with
`--metrics` only to read its per-GPU state:
- `fill` (20 s): every GPU filling; per GPU the NVML utilization (mean, MAE against the
  target, the first 3 s left out), gpufill's GPU memory (NVML's process list), the power
  draw, and the CPU of the whole process.
- `job` (25 s): a foreign PyTorch job (bf16 matmul loop) on `--job-gpu`: gpufill should
  yield on that GPU alone and every other GPU hold the target as in `fill`.
- `after` (20 s from the job's exit): every GPU filling again (the first 8 s left out:
  the grace after a process leaves is 5 s).
- SIGTERM: seconds to exit, and whether any GPU still lists a process of ours or shows
  utilization from 0.5 s after the exit on.

Part 2, `gpufill run --gpus 0,UUID-of-GPU-1` (one GPU by index, one by UUID) with
`yield.idle_grace_s = --grace` (default 4, to fit the run): a quiet holder on GPU 0 (a
context, one matmul, then nothing) and a live service on GPU 1 (isolated requests of a
small bf16 MLP, Poisson, 20/s). The service runs alone 12 s, beside gpufill 24 s, alone
12 s. Expected, as on one GPU (docs/benchmarks.md, "Live services"): GPU 0 filled beside
the dormant holder after a grace and a probe; gpufill holding off GPU 1 after its first
probe; the metrics carry both GPUs with their index and UUID labels, and no other GPU.

Prints a short table; writes multi_gpu.json and the gpufill logs to $OUT. About 2.5 min.

    python3 scripts/lab.py multi-gpu carry/gpufill [--job-gpu 0] [--grace 4]
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

from .lib import (N, Gpufill, cuda_visible, fmt, mae, mean, nvml, out_dir, parser, pct,
                  samples_since, scrape_by_gpu, torch_job)

PORT = 9425
TARGET = 50.0  # the default target


class Monitor:
    """Every 0.5 s: NVML utilization samples, power and our GPU memory per GPU, and a
    scrape of gpufill's metrics; all stamped with the wall clock."""

    def __init__(self, hs, pid):
        self.hs, self.pid = hs, pid
        self.last = [int(time.time() * 1e6)] * len(hs)
        self.util = [[] for _ in hs]
        self.power = [[] for _ in hs]
        self.memory = [[] for _ in hs]
        self.metrics = []
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            now = time.time()
            for i, h in enumerate(self.hs):
                new = samples_since(h, self.last[i])
                if new:
                    self.last[i] = int(new[-1][0] * 1e6)
                    self.util[i] += new
                self.power[i].append((now, N.nvmlDeviceGetPowerUsage(h) / 1e3))
                mine = [p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h)
                        if p.pid == self.pid and p.usedGpuMemory is not None]
                if mine:
                    self.memory[i].append((now, mine[0] / 2**20))
            m, _ = scrape_by_gpu(PORT)
            if m:
                self.metrics.append((now, m))
            time.sleep(0.5)

    def finish(self):
        self.stop = True
        self.thread.join()

    def series(self, kind, i, lo, hi):
        return [v for t, v in getattr(self, kind)[i] if lo <= t < hi]

    def metric_at(self, name, i, t, state=""):
        """The metric's last value scraped at or before wall time t."""
        vals = [m.get((name, i, state)) for ts, m in self.metrics if ts <= t]
        vals = [v for v in vals if v is not None]
        return vals[-1] if vals else None

    def state_share(self, i, lo, hi):
        """The share of scrapes in [lo, hi) that found GPU i in each state."""
        counts, n = {}, 0
        for ts, m in self.metrics:
            if lo <= ts < hi:
                n += 1
                for (name, gpu, state), v in m.items():
                    if name == "gpufill_state" and gpu == i and v == 1:
                        counts[state] = counts.get(state, 0) + 1
        return {k: round(v / n, 2) for k, v in counts.items()} if n else {}


def part_defaults(a, hs, out):
    n = len(hs)
    g = Gpufill(a.gpufill, port=PORT, log_path=os.path.join(a.out, "gpufill-multi-defaults.log"),
                rust_log="gpufill=info")
    deadline = time.time() + 60
    while time.time() < deadline and g.alive():
        m, _ = scrape_by_gpu(PORT)
        if sum(1 for i in range(n) if m.get(("gpufill_state", i, "filling")) == 1) == n:
            break
        time.sleep(0.1)
    t_fill = time.time()
    mon = Monitor(hs, g.pid)
    cpu0, threads0 = g.cpu(), g.threads_cpu()
    bounds, t = {}, t_fill
    for name, secs in (("fill", 20.0), ("job", 25.0), ("after", 20.0)):
        bounds[name] = (t, t + secs)
        job = torch_job(a.job_gpu, secs - 2) if name == "job" else None
        time.sleep(max(0.0, t + secs - time.time()))
        if job:
            # PyTorch's start makes the job outlive its phase by a few seconds: the
            # phase ends when it exits.
            job.wait()
            bounds[name] = (t, time.time())
            t = time.time() - secs
        if name == "fill":
            cpu_fill = 100 * (g.cpu() - cpu0) / (time.time() - t_fill)
        t += secs
    t_end = time.time()
    alive = g.alive()
    cpu = 100 * (g.cpu() - cpu0) / (t_end - t_fill) if alive else None
    threads = {k: 100 * (v - threads0.get(k, 0.0)) / (t_end - t_fill)
               for k, v in (g.threads_cpu() if alive else {}).items()}
    code, stop_s = g.stop()
    t_exit = time.time()
    time.sleep(2.5)
    mon.finish()
    leftover = {i: [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
                for i, h in enumerate(hs)}
    rows = []
    for i in range(n):
        row = {"gpu": i}
        for name, (lo, hi) in bounds.items():
            skip = 3 + (5 if name == "after" else 0)
            u = mon.series("util", i, lo + skip, hi)
            row[f"util_{name}"] = mean(u)
            row[f"mae_{name}"] = mae(u, TARGET)
            row[f"power_{name}"] = mean(mon.series("power", i, lo + skip, hi))
            row[f"states_{name}"] = mon.state_share(i, lo + skip, hi)
            y0, y1 = (mon.metric_at("gpufill_yields_total", i, lo),
                      mon.metric_at("gpufill_yields_total", i, hi))
            row[f"yields_{name}"] = None if y0 is None or y1 is None else y1 - y0
        row["memory_mib_max"] = max(mon.series("memory", i, t_fill, t_exit), default=None)
        row["util_after_exit"] = mon.series("util", i, t_exit + 0.5, t_exit + 2.5)
        row["listed_after_exit"] = leftover[i]
        rows.append(row)
    out["defaults"] = {"gpus": n, "job_gpu": a.job_gpu, "alive": alive, "exit_code": code,
                       "sigterm_to_exit_s": stop_s, "cpu_pct_core_fill": cpu_fill,
                       "cpu_pct_core_total": cpu, "cpu_pct_core_per_thread": threads,
                       "per_gpu": rows}
    print(f"== part 1: `gpufill run` at the defaults on {n} GPUs; a job on GPU {a.job_gpu} "
          f"in phase 'job'")
    print("gpu | util fill | MAE fill | util job | MAE job | yields job | states job | "
          "MAE after | MiB | W fill | util after exit")
    for r in rows:
        print(f"{r['gpu']} | {fmt(r['util_fill'], 1)} | {fmt(r['mae_fill'])} | "
              f"{fmt(r['util_job'], 1)} | {fmt(r['mae_job'])} | {fmt(r['yields_job'])} | "
              f"{r['states_job']} | {fmt(r['mae_after'])} | {fmt(r['memory_mib_max'], 0)} | "
              f"{fmt(r['power_fill'], 0)} | max {max(r['util_after_exit'], default=None)} "
              f"listed {r['listed_after_exit']}")
    print(f"CPU % of a core, whole process: {fmt(cpu_fill)} while filling ({fmt(cpu_fill / n)} "
          f"per GPU), {fmt(cpu)} over the three phases; SIGTERM to exit {stop_s:.2f} s, "
          f"exit code {code}, alive throughout {alive}", flush=True)
    print("  per thread:", {k: round(v, 2) for k, v in sorted(threads.items()) if v > 0.01})


HOLDER = """
import sys, time, torch
a = torch.randn(1024, 1024, device="cuda"); (a @ a).sum().item()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""

SERVICE = """
import json, random, sys, time, torch
net = []
for _ in range(6):
    net += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
net = torch.nn.Sequential(*net).to("cuda", torch.bfloat16).eval()
x = torch.randn(1, 1024, dtype=torch.bfloat16).pin_memory()
def request():
    with torch.no_grad():
        net(x.to("cuda", non_blocking=True)).cpu()
for _ in range(50):
    request()
torch.cuda.synchronize()
print("ready", flush=True)
start, secs, rate = float(sys.stdin.readline()), float(sys.argv[1]), float(sys.argv[2])
rng, t, out = random.Random(7), start, []
while True:
    t += rng.expovariate(rate)
    if t >= start + secs:
        break
    while time.time() < t:
        time.sleep(min(0.002, max(0.0, t - time.time())))
    t0 = time.time(); request(); out.append((t0, time.time() - t0))
print(json.dumps(out), flush=True)
"""


def part_holder_and_service(a, hs, out):
    n = len(hs)
    if n < 2:
        print("== part 2 needs 2 GPUs")
        return
    uuid1 = cuda_visible(1)
    alone1, withs, alone2 = 12.0, 24.0, 12.0
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(alone1 + withs + alone2 + 30)],
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(0)))
    service = subprocess.Popen([sys.executable, "-c", SERVICE, str(alone1 + withs + alone2), "20"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES=uuid1))
    for p in (holder, service):
        if "ready" not in p.stdout.readline():
            raise RuntimeError("a workload failed to start")
    t0 = time.time() + 0.5
    service.stdin.write(f"{t0}\n")
    service.stdin.flush()
    time.sleep(max(0.0, t0 + alone1 - time.time()))
    t_with = time.time()
    g = Gpufill(a.gpufill, ["--gpus", f"0,{uuid1}"], config=f"[yield]\nidle_grace_s = {a.grace}\n",
                port=PORT, log_path=os.path.join(a.out, "gpufill-multi-holder-service.log"),
                rust_log="gpufill=info,gpufill_runtime=debug")
    mon = Monitor(hs, g.pid)
    cpu0 = g.cpu()
    time.sleep(max(0.0, t_with + withs - 0.5 - time.time()))
    _, text = scrape_by_gpu(PORT)
    cpu = 100 * (g.cpu() - cpu0) / (time.time() - t_with)
    code, _ = g.stop()
    t_stop = time.time()
    mon.finish()
    lat = json.loads(service.stdout.readline())
    service.wait()
    holder.kill()
    holder.wait()
    phases = {"alone before": (t0, t_with), "with gpufill": (t_with, t_stop),
              "alone after": (t_stop + 0.5, t0 + alone1 + withs + alone2)}
    svc = {}
    for name, (lo, hi) in phases.items():
        ms = [d * 1e3 for t, d in lat if lo <= t < hi]
        svc[name] = {"n": len(ms), "p50": pct(ms, 50), "mean": mean(ms), "p99": pct(ms, 99)}
    late = (t_stop - 10, t_stop)  # the last 10 s with gpufill
    gpus = {}
    for i in range(2):
        gpus[i] = {"util_last_10s": mean(mon.series("util", i, *late)),
                   "states_last_10s": mon.state_share(i, *late),
                   "beside_at_end": mon.metric_at("gpufill_filling_beside", i, t_stop),
                   "pauses_total": mon.metric_at("gpufill_pauses_total", i, t_stop),
                   "yields_total": mon.metric_at("gpufill_yields_total", i, t_stop)}
    labelled = sorted(set(re.findall(r'gpufill_worker_up\{gpu="(\d+)",UUID="([^"]+)"', text)))
    expected = sorted({("0", cuda_visible(0)), ("1", uuid1)})
    out["holder_and_service"] = {"service": svc, "gpus": gpus, "cpu_pct_core": cpu,
                                 "exit_code": code, "worker_up_labels": labelled,
                                 "labels_as_selected": labelled == expected}
    print(f"== part 2: --gpus 0,{uuid1}, idle_grace_s {a.grace}: quiet holder on GPU 0, "
          f"service at 20/s on GPU 1")
    for i, r in gpus.items():
        print(f"  GPU {i}: utilization over the last 10 s {fmt(r['util_last_10s'], 1)}, "
              f"states {r['states_last_10s']}, filling beside {r['beside_at_end']}, "
              f"pauses {r['pauses_total']}, yields {r['yields_total']}")
    for name, s in svc.items():
        print(f"  service {name:13} n={s['n']:3d} p50 {s['p50']:.3f} mean {fmt(s['mean'], 3)} "
              f"p99 {s['p99']:.3f} ms")
    print(f"  metrics' worker_up labels {labelled}: as selected {labelled == expected}; "
          f"CPU {cpu:.2f} % of a core; exit code {code}", flush=True)


def main(argv):
    ap = parser("multi-gpu", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--job-gpu", type=int, default=0)
    ap.add_argument("--grace", type=float, default=4.0)
    ap.add_argument("--parts", default="defaults,holder-service")
    a = ap.parse_args(argv)
    a.out = out_dir("bench-out")
    nvml()
    hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    print(subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout,
          flush=True)
    out = {}
    try:
        for part in a.parts.split(","):
            {"defaults": part_defaults, "holder-service": part_holder_and_service}[part](a, hs, out)
    finally:
        with open(os.path.join(a.out, "multi_gpu.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
    d = out.get("defaults", {})
    return 0 if d.get("alive") and d.get("exit_code") == 0 else 1

