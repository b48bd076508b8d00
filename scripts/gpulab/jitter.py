"""`jitter`, issue 30: our kernels' start jitter on an empty GPU, and the target held at the defaults.

`python3 scripts/lab.py jitter WHAT ...`, WHAT one of these (run on the GPU machine;
build here with scripts/build-carry.sh, carry `carry`; scripts/jitter_session.sh runs
them):

- `sweep --gpu N`: a probe pair (two 5 us kernels, the second launched once the first has
  finished; gpufill's `probe`) after idle gaps of 1 ms to 2 s, and after a gap of 25 ms
  that ends in an NVML process-list read: how late the first kernel starts against the
  second (the GPU's own start latency after idle, with nobody else). CuPy and pynvml.
- `idle --exe PATH --gpu N --seconds S --tag T`: `gpufill run` alone at the literal
  defaults with every group's timing traced (`-vv` level for gpufill_cuda/nvml/runtime);
  reads gpufill's own metrics every second (no NVML call of ours): mean utilization from
  10 s on, pauses. The log goes to $OUT/T.log.
- `holder --exe PATH --gpu N --seconds S`: the same beside a dormant holder (a PyTorch
  process that allocates 1 GiB, runs one matmul, then sleeps) from 5 s on, with
  `yield.idle_grace_s = --grace`: utilization from one idle grace plus 5 s on.
- `bursting --exe PATH --gpu N --every 120 --bursts 2`: a holder that runs a 0.5 s burst
  of matmuls every `--every` s, at the defaults (idle grace 30 s): how long after each
  burst gpufill fills again.
- `analyze LOG...` (here, no GPU): the traced groups of an `idle` log as a histogram of
  how late each started and what each late one lines up with (our full process-list
  reads, per-process samples, device-file opens, our own idle before it).

Each prints one short line a run; the details go under $OUT (or --out).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from .lib import Gpufill, cpu_seconds, cuda_visible, log_time, parser, scrape

OUT = os.environ.get("OUT", "/tmp/host-jitter")
TRACE = "info,gpufill_cuda=trace,gpufill_nvml=trace,gpufill_runtime=trace"


class Run:
    """`gpufill run` on one GPU with its metrics endpoint, sampled every `every` s."""

    def __init__(self, exe, gpu, tag, config=None, every=1.0):
        self.port = 9460 + gpu
        self.tag, self.every = tag, every
        self.g = Gpufill(exe, ["--gpus", str(gpu)], config=config, port=self.port,
                         log_path=os.path.join(OUT, f"{tag}.log"), rust_log=TRACE)
        self.p = self.g.proc
        self.t0, self.t0_unix = time.monotonic(), time.time()
        self.samples = []  # (seconds since start, metrics)
        self.cpu = []  # (seconds since start, gpufill's CPU seconds)

    def sample_until(self, seconds):
        while True:
            t = time.monotonic() - self.t0
            if t >= seconds or self.p.poll() is not None:
                return
            m = scrape(self.port)
            if m:
                self.samples.append((t, m))
            try:
                self.cpu.append((t, cpu_seconds(self.p.pid)))
            except OSError:
                pass
            time.sleep(max(0.0, self.every - (time.monotonic() - self.t0 - t)))

    def stop(self):
        rc, _ = self.g.stop(timeout=15)
        with open(os.path.join(OUT, f"{self.tag}.metrics.json"), "w") as f:
            json.dump(self.samples, f)
        return rc

    def util(self, start, end=float("inf")):
        xs = [m["gpufill_utilization_percent"] for t, m in self.samples
              if start <= t < end and "gpufill_utilization_percent" in m]
        return (statistics.mean(xs) if xs else float("nan")), len(xs)

    def cpu_percent(self, start):
        """gpufill's CPU, % of one core, from its threads' CPU seconds read at each sample,
        between the first read at or after `start` s and the last; None with fewer than
        two."""
        xs = [(t, c) for t, c in self.cpu if t >= start]
        if len(xs) < 2 or xs[-1][0] <= xs[0][0]:
            return None
        return 100.0 * (xs[-1][1] - xs[0][1]) / (xs[-1][0] - xs[0][0])

    def loop_util(self, start):
        """The mean of every NVML sample the loop took (its `sample util=` log lines) from
        `start` s on, and how many. The metric scraped once a second can alias: the loop
        reads a sample every 200 ms, and on a host where one sample a second reads higher
        (gpufill's once-a-second reads) a scrape in phase with it reads only that one."""
        xs = [float(m.group(1)) for at, line in self.g.lines
              if at is not None and at >= self.t0_unix + start
              for m in [re.search(r"sample util=([0-9.]+)", line)] if m]
        return (statistics.mean(xs) if xs else float("nan")), len(xs)

    def pauses(self):
        return self.samples[-1][1].get("gpufill_pauses_total", 0) if self.samples else float("nan")

    def count(self, word):
        return self.g.count(word)


def cmd_idle(a):
    r = Run(a.exe, a.gpu, a.tag)
    r.sample_until(a.seconds)
    rc = r.stop()
    u, n = r.util(10)
    lu, ln = r.loop_util(10)
    cpu = r.cpu_percent(10)
    cpu = "n/a" if cpu is None else f"{cpu:.2f} %"
    print(f"idle {a.tag}: gpu {a.gpu} {a.seconds:.0f} s: mean utilization {u:.2f} % "
          f"({n} reads from 10 s; the loop's own samples: {lu:.2f} % of {ln}), CPU {cpu} of a core from 10 s, pauses {r.pauses():.0f} (log lines 'paused': {r.count('paused')}), "
          f"late groups logged {r.count('timing shows another context') + r.count('started late')} / {r.count('group timing')} groups, exit {rc}",
          flush=True)


HOLDER = """
import torch, time, sys
a = torch.empty(256 * 2**20, device='cuda')
b = torch.randn(2048, 2048, device='cuda'); (b @ b).sum().item()
print('holder ready', flush=True)
every, bursts = float(sys.argv[1]), int(sys.argv[2])
t0 = time.time()
for i in range(bursts):
    time.sleep(max(0.0, t0 + (i + 1) * every - time.time()))
    s = time.time()
    while time.time() - s < 0.5:
        b @ b
    torch.cuda.synchronize()
    print(f'burst {i} end {time.time():.3f}', flush=True)
time.sleep(float(sys.argv[3]))
"""


def holder(gpu, every, bursts, tail):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(gpu))
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(every), str(bursts), str(tail)],
                            env=env, stdout=subprocess.PIPE, text=True)


def cmd_holder(a):
    r = Run(a.exe, a.gpu, a.tag, config=f"[yield]\nidle_grace_s = {a.grace}\n")
    r.sample_until(5)
    h = holder(a.gpu, 1e9, 0, a.seconds)
    h.stdout.readline()  # "holder ready": its context and its one matmul are done
    ready = time.monotonic() - r.t0
    r.sample_until(ready + a.seconds)
    h.kill()
    rc = r.stop()
    # As the issue measured it: the 15 s from 12 s after the holder started, and on.
    u, n = r.util(ready + 12, ready + 27)
    rest, m = r.util(ready + 12)
    print(f"holder {a.tag}: gpu {a.gpu} dormant holder ready at {ready:.1f} s, idle grace "
          f"{a.grace:g} s: mean utilization {u:.2f} % over 12-27 s after it ({n} reads), "
          f"{rest:.2f} % from 12 s to the end ({m}), pauses {r.pauses():.0f}, "
          f"probes {r.count('probe pair')}, exit {rc}", flush=True)


def cmd_bursting(a):
    r = Run(a.exe, a.gpu, a.tag, every=0.25)
    r.sample_until(3)
    t_start = time.monotonic()
    h = holder(a.gpu, a.every, a.bursts, 45)
    ends = []

    def read():
        for line in h.stdout:
            if line.startswith("burst"):
                ends.append(time.monotonic())
    th = threading.Thread(target=read, daemon=True)
    th.start()
    r.sample_until(t_start - r.t0 + a.every * a.bursts + 45)
    h.kill()
    rc = r.stop()
    refills = []
    for e in ends:
        rel = e - r.t0
        later = [t for t, m in r.samples if t > rel + 1 and m.get("gpufill_duty_ratio", 0) > 0]
        refills.append(round(later[0] - rel, 2) if later else None)
    spells = []
    for e in ends:
        rel = e - r.t0
        u, _ = r.util(rel + 40, rel + 40 + 15)
        spells.append(round(u, 1))
    print(f"bursting {a.tag}: gpu {a.gpu} a 0.5 s burst every {a.every:g} s: filling again "
          f"{refills} s after each burst (idle grace 30 s); utilization 40-55 s after each: "
          f"{spells} %; pauses {r.pauses():.0f}, exit {rc}", flush=True)


SWEEP_KERNEL = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


def cmd_sweep(a):
    os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible(a.gpu)
    import cupy as cp
    import pynvml as N
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(a.gpu)
    k = cp.RawKernel(SWEEP_KERNEL, "spin")
    s = cp.cuda.Stream(non_blocking=True)
    ev = [cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()]
    ns = cp.uint64(5000)

    def pair(list_read=False):
        if list_read:
            N.nvmlDeviceGetComputeRunningProcesses(h)
        host = []
        for i in range(2):
            ev[i].record(s)
            k((1,), (32,), (ns,), stream=s)
            host.append(time.perf_counter())
            ev[2].record(s)
            ev[2].synchronize()
        gpu_us = cp.cuda.get_elapsed_time(ev[0], ev[1]) * 1e3
        return (host[1] - host[0]) * 1e6 - gpu_us

    for _ in range(20):
        pair()
    rows = []
    plan = [(0.001, 60), (0.005, 60), (0.025, 60), (0.05, 40), (0.1, 30), (0.25, 20),
            (0.5, 16), (1.0, 10), (2.0, 6)]
    res = {}
    for gap, n in plan:
        xs = []
        for _ in range(n):
            time.sleep(gap)
            xs.append(pair())
        res[f"{gap * 1e3:g} ms"] = xs
    xs = []
    for _ in range(60):
        time.sleep(0.025)
        xs.append(pair(list_read=True))
    res["25 ms, then a process-list read"] = xs
    clocks = N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)
    with open(os.path.join(OUT, f"sweep-gpu{a.gpu}.json"), "w") as f:
        json.dump(res, f)
    print(f"sweep gpu {a.gpu}: first kernel of a probe pair late against the second, us "
          f"(p50 / p90 / max, n > 60 us of n); SM clock now {clocks} MHz", flush=True)
    for name, xs in res.items():
        xs = sorted(xs)
        rows.append(f"  after {name:34} {xs[len(xs) // 2]:7.1f} {xs[int(len(xs) * 0.9)]:7.1f} "
                    f"{xs[-1]:7.1f}   {sum(x > 60 for x in xs)}/{len(xs)}")
    print("\n".join(rows), flush=True)


# ------------------------------------------------------------------ analysis, here
FIELD = re.compile(r"(\w+)=(-?[\d.]+|true|false)")


def cmd_analyze(a):
    for path in a.logs:
        groups, full, samples, opens, pauses = [], [], [], [], []
        with open(path, errors="replace") as f:
            for line in f:
                t = log_time(line)
                if t is None:
                    continue
                if "group timing" in line:
                    d = dict(FIELD.findall(line))
                    # "chained" (the trace added at 052ca04's rule) or "judged" (issue
                    # 30's rule, with the record call that is now the host's reference).
                    judged = d.get("chained", d.get("judged")) == "true"
                    groups.append((t, float(d["late_us"]), float(d.get("idle_before_us", 0)),
                                   judged, float(d["host_gap_us"]),
                                   float(d.get("record_call_us", "nan")),
                                   d.get("slow_record") == "true"))
                elif "full process list read" in line:
                    full.append(t)
                elif "per-process samples read" in line:
                    samples.append(t)
                elif "device file opened" in line:
                    opens.append(t)
                elif "paused" in line:
                    pauses.append(t)
        if not groups:
            print(f"{path}: no traced groups")
            continue
        t0 = groups[0][0]
        lates = [g[1] for g in groups if g[3]]
        edges = [-1e9, 0, 20, 40, 60, 80, 100, 130, 170, 250, 1e9]
        hist = [sum(1 for x in lates if lo < x <= hi) for lo, hi in zip(edges, edges[1:])]
        names = ["<=0", "0-20", "20-40", "40-60", "60-80", "80-100", "100-130", "130-170",
                 "170-250", ">250"]
        print(f"{path}: {len(groups)} groups over {groups[-1][0] - t0:.0f} s, {len(pauses)} pauses, "
              f"{len(full)} full list reads, {len(samples)} per-process sample reads, "
              f"{len(opens)} device-file opens")
        print("  late_us histogram: " + ", ".join(f"{n} {c}" for n, c in zip(names, hist)))
        gaps = sorted(g[4] for g in groups)
        calls = sorted(g[5] for g in groups if g[5] == g[5])
        print(f"  host gap us: p50 {gaps[len(gaps) // 2]:.0f}, p99 {gaps[int(len(gaps) * 0.99)]:.0f}, "
              f"max {gaps[-1]:.0f}; over 90 us: {sum(x > 90 for x in gaps)}"
              + (f"; record call us p50 {calls[len(calls) // 2]:.1f}, max {calls[-1]:.0f}, "
                 f"stalled records {sum(g[6] for g in groups)}" if calls else ""))

        def before(ts, t):
            xs = [x for x in ts if x <= t]
            return t - xs[-1] if xs else float("inf")
        late = [g for g in groups if g[3] and g[1] > 60]
        calm = [g for g in groups if g[3] and g[1] <= 20]
        for label, ts in (("full list read", full), ("samples read", samples),
                          ("device-file open", opens)):
            def share(gs):
                return sum(1 for g in gs if before(ts, g[0]) < 0.06) / len(gs) if gs else float("nan")
            print(f"  a {label} within 60 ms before: {share(late):.2f} of late groups, "
                  f"{share(calm):.2f} of calm ones")
        idle_late = [g[2] / 1e3 for g in late]
        print(f"  host ms since the previous launch, late groups: "
              f"{sorted(round(x) for x in idle_late)[:40]}")
        print("  late groups (s from start, late_us, idle ms): "
              + "; ".join(f"{g[0] - t0:.2f} {g[1]:.0f} {g[2] / 1e3:.0f}" for g in late[:40]))


def main(argv):
    global OUT
    ap = parser("jitter", __doc__)
    ap.add_argument("command", choices=["sweep", "idle", "holder", "bursting", "analyze"])
    ap.add_argument("logs", nargs="*")
    ap.add_argument("--exe", default="carry/gpufill")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=70)
    ap.add_argument("--tag", default="run")
    ap.add_argument("--grace", type=float, default=5)
    ap.add_argument("--every", type=float, default=120)
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    OUT = a.out
    os.makedirs(OUT, exist_ok=True)
    {"sweep": cmd_sweep, "idle": cmd_idle, "holder": cmd_holder, "bursting": cmd_bursting,
     "analyze": cmd_analyze}[a.command](a)
