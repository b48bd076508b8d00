"""`gaps`: issue 40's item 4, gpufill filling the gaps of live work without MPS: for each
live workload, runs alone and with gpufill interleaved (alone, with, alone, ..., alone;
`--pairs` with-runs, one more alone), each with-run over the alone runs on either side.

Workloads (`--workloads a,b,...`, in that order):
- `train-input`: ResNet-18 training (torchvision, random weights, `--batch` images of
  `--size` px, bf16 autocast, AdamW, each step synchronised), then a host sleep of
  `--wait-ms` (25) standing for the wait on its input; metric: steps per second. The
  worker prints what a step takes before its wait (the goal: 10-15 ms on an H100/H200).
- `decode`: a GPT-2 (small, from GPT2Config) decode service, Poisson arrivals at 2 a
  second (every run replays the same arrivals), each request a 16-token prompt then `--new-tokens` (32) tokens one by one with
  the KV cache, each token read back as it comes; metric: latency p50 and mean.
- `sub-ms`: isolated sub-millisecond requests at 20 a second (`live`'s `mlp`: 6 bf16
  1024-wide layers at batch 1, input in and output out, ~0.65 ms); metric: p50, p99 and
  the p99's difference in ms.
- `train-full`: the ResNet-18 training with no wait: steps back to back; steps per second.
- `arrive`: a fresh process that, when told, creates its CUDA context and runs
  `--arrive-iters` bf16 matmuls of `--arrive-size` (synchronised every 10); in the
  with-runs gpufill is started first and fills (up to `--settle` s) before the job is told
  to go; metric: its time to completion from its first CUDA call (and its loop alone).
  The next run's process is started (torch imported, no CUDA) while one runs.

The other workloads run in one process each for all their runs (`live`'s worker): phases
of `--phase` s (0: the longest up to 20 s that fits `--budget` s), gpufill started at a
with-phase's start and stopped 0.3 s before its end; each phase's statistics leave out
its first `--skip` s and its last 0.5 s.

`--toggle`: one gpufill for all of a workload's phases instead of one a with-run, started
as the worker's plan is about to begin (the plan waits the idle grace and 4 s more, so
that it fills beside the job from the first with-phase), stopped with SIGSTOP through
each alone phase and continued with SIGCONT at each with-phase's start. Short phases
(`--phase` 0 gives 4 s, `--skip` defaults to 0.5 s) then alternate many times a minute,
so that alone and with runs see the same slow swings of the host (a decode request's
time switched between about 150, 240 and 300 ms for seconds at a time, alone as with,
on an H200 host: the run-to-run spread that hides a 2 % cost). What this changes: an
alone phase has gpufill's context on the GPU but none of its kernels (a job's first
kernel after our last one pays a switch, inside the skip); gpufill's first NVML sample
after a stop covers the stopped time (its estimate is diluted once a phase, by about a
tenth of a sample's weight); its pacing counts are not reported (they span the stops).
Not for `arrive`, whose job is a newcomer to each with-run.

gpufill runs as `gpufill run --gpus N --metrics 127.0.0.1:PORT` plus `--gpufill-args`
(default `--beside-live fill-gaps --max-cost 2`) and a config of one line,
`yield.idle_grace_s = --grace` (default 2; negative: no config). fill_gaps fills beside
a process only once gpufill has seen it listed for the idle grace (30 s by default,
longer than a run): each with-run starts a new gpufill, so a short grace stands for a
gpufill that has run beside the job for a while; `--skip` (default grace + 1.5 s) leaves
the grace out of the statistics. `arrive`'s job is a newcomer that gpufill yields to for
the grace. Per with-run, over the same
window: its duty (`gpufill_duty_ratio`) and estimated cost
(`gpufill_estimated_cost_ratio`, "missing" when not served), scraped each second, as
means; its CPU (% of a core, and by thread: the launcher, the loop, the rest); and its
log's lines, numbers blanked and counted, as the
reasons it filled or held off (start-up lines left out), and from its cost-bound lines
what the estimate divided its charge by (the job's share and where it came from). The GPU's utilization (NVML,
mean of the samples in the window) alone and with, and the SM clock the same way.

The job's cost: 1 - ratio for steps per second, ratio - 1 for latencies and times (median
over the pairs), with a distribution-free interval of that median (order statistics: with
5 pairs the lowest and highest ratio, 94 %; with 15 the 4th from either end, 96 %);
noise: half the alone runs' range over their median. A workload is "ok" when the cost is
within its bound (1 % for train-input, 2 % otherwise; sub-ms also p99 +0.1 ms at most),
"unresolved" unless its cost interval lies wholly under the bound or over it (more pairs
narrow the interval; the alone runs' range does not). The estimate "holds" (issue 40,
item 2) when cost - noise <= estimate <= 3 x cost + 1 point.

Writes under `--out` (default $OUT, else /tmp/gpulab-gaps): gaps-runs.jsonl (a line per
run), gaps-summary.json (host, GPU, driver, compute policy, gpufill's version, the
arguments, per workload its runs and summary; rewritten after each workload) and
gpufill-WORKLOAD.log (every with-run's log). Prints the estimated wall time first, a line
per workload as it ends, then the tables and the reasons.

  python3 scripts/lab.py gaps --gpu 1 --workloads train-input,sub-ms,decode --pairs 5
  bash scripts/gaps_session.sh 1 train-input,sub-ms,decode      # the same, packed
"""
import collections
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

from .lib import (ROOT, ClockPoll, Gpufill, UtilTrace, gpu_env, handle, interleave, mean,
                  neighbour_diffs, neighbour_ratios, out_dir, parser, pct, python_child, scrape,
                  spread)
from .live import finish_worker, service_request, start_worker, training_step
from .live import worker as plan_worker

PORT = 9428  # plus the GPU's index (live's is 9418)
EST = "gpufill_estimated_cost_ratio"
DUTY = "gpufill_duty_ratio"


class Workload:
    """A live workload: its worker model (None: `arrive`), request rate (None: steps back
    to back), warm-up requests, metrics (the gated ones decide the cost), cost bound,
    p99 bound (ms over alone), and the seconds it takes to start (for the estimate)."""

    def __init__(self, model, rate, warmup, metrics, gated, bound, startup, p99_ms=None):
        self.model, self.rate, self.warmup = model, rate, warmup
        self.metrics, self.gated, self.bound = metrics, gated, bound
        self.startup, self.p99_ms = startup, p99_ms


WORKLOADS = {
    "train-input": Workload("train-input", None, 20, ("rate",), ("rate",), 0.01, 15),
    "decode": Workload("decode", 2.0, 3, ("p50", "mean"), ("p50", "mean"), 0.02, 15),
    "sub-ms": Workload("mlp", 20.0, 50, ("p50", "p99"), ("p50",), 0.02, 10, p99_ms=0.1),
    "train-full": Workload("train-full", None, 20, ("rate",), ("rate",), 0.02, 15),
    "arrive": Workload(None, None, 0, ("time", "loop"), ("time",), 0.02, 5),
}
UNITS = {"rate": "steps/s", "p50": "ms", "mean": "ms", "p99": "ms", "time": "s", "loop": "s"}
HIGHER_IS_BETTER = {"rate"}
ARRIVE_PHASE = 8.0  # s a run of `arrive` takes, for the estimate
# Lines every start logs: not reasons.
START_LINES = ("==== ", "metrics listening", "context ready", "opening a new CUDA context",
               "new settings applied", "scheduled target", "holding GPM", "inotify")


# ------------------------------------------------------------------ workload processes
def worker(argv):
    """`live`'s worker with gaps' own workloads."""
    plan_worker(argv, build=build)


def build(model, dev, opts):
    """One request (or step) of `train-input`, `train-full` or `decode`; others as live's."""
    if model in ("train-input", "train-full"):
        step = training_step(opts["train_model"], dev, batch=opts["batch"], size=opts["size"])
        for _ in range(5):
            step()
        t = time.perf_counter()
        for _ in range(10):
            step()
        print(f"gaps {model}: {opts['train_model']} batch {opts['batch']} at {opts['size']} px, "
              f"a step takes {(time.perf_counter() - t) * 100:.1f} ms before its wait",
              file=sys.stderr, flush=True)
        wait = opts["wait_ms"] / 1e3 if model == "train-input" else 0.0
        if not wait:
            return step

        def request():
            step()
            time.sleep(wait)  # the input pipeline
        return request
    if model == "decode":
        return decode_request(dev, opts["new_tokens"])
    return service_request(model, dev, opts)


def decode_request(dev, new_tokens, prompt=16):
    """A GPT-2 decode request: the prompt's forward, then one token at a time with the KV
    cache, each token read back (streamed) before the next forward."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    net = GPT2LMHeadModel(GPT2Config()).to(dev).eval()
    ids = torch.randint(0, 50257, (1, prompt), device=dev)

    def request():
        with torch.no_grad():
            out = net(ids, use_cache=True)
            for _ in range(new_tokens - 1):
                tok = out.logits[:, -1:].argmax(-1)
                tok.item()
                out = net(tok, past_key_values=out.past_key_values, use_cache=True)
            out.logits[:, -1:].argmax(-1).item()
    return request


def arrive_job(argv):
    """The `arrive` job: imports torch, says "imported", waits for a line, then creates its
    CUDA context and runs ITERS bf16 matmuls of SIZE, synchronised every 10; prints its
    times (Unix s: start, context and first matmul done, end) as JSON."""
    import torch
    iters, size = int(argv[0]), int(argv[1])
    print("imported", flush=True)
    sys.stdin.readline()
    t0 = time.time()
    m = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(m)
    torch.matmul(m, m, out=c)
    torch.cuda.synchronize()
    t1 = time.time()
    for i in range(iters):
        torch.matmul(m, m, out=c)
        if i % 10 == 9:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(json.dumps({"t0": t0, "t1": t1, "t2": time.time()}), flush=True)


def spawn_arrive(a):
    return subprocess.Popen(python_child("gaps", "arrive_job", [str(a.arrive_iters), str(a.arrive_size)]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=a.env)


# ------------------------------------------------------------------ gpufill beside
class GpufillExited(RuntimeError):
    pass


class Beside:
    """gpufill beside the workload for one with-run: started on enter (the log appended to
    gpufill-WORKLOAD.log), stopped on exit; `watch` scrapes it and reads its CPU."""

    def __init__(self, a, name):
        self.a, self.name, self.scrapes, self.cpu_pct, self.cpu_split = a, name, [], None, {}

    def __enter__(self):
        a = self.a
        config = f"[yield]\nidle_grace_s = {a.grace:g}\n" if a.grace >= 0 else None
        self.g = Gpufill(a.gpufill, ["--gpus", str(a.gpu), *a.gargs], port=a.port, config=config,
                         log_path=os.path.join(a.out, f"gpufill-{self.name}.log"),
                         rust_log=a.rust_log)
        self.healthy = self.g.wait_healthy(5)
        self.check()
        return self

    def __exit__(self, *exc):
        self.rc, self.stop_s = self.g.stop()

    def check(self):
        if not self.g.alive():
            self.g.stop()
            tail = [line for _, line in self.g.lines[-5:]]
            raise GpufillExited(f"gpufill exited ({self.g.proc.returncode}): " + " | ".join(tail))

    def settle(self, secs):
        """Until gpufill's duty is above 0, at most `secs`; whether it was."""
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if scrape(self.a.port, self.a.gpu).get(DUTY, 0) > 0:
                return True
            time.sleep(0.1)
        return False

    def watch(self, lo, hi, done=None):
        """From monotonic `lo` to `hi`, or until `done()`: a scrape a second, CPU at both
        ends."""
        sleep_until(lo)
        self.check()
        c0, t0, th0 = self.g.cpu(), time.monotonic(), self.g.threads_cpu()
        nxt = t0
        while True:
            now = time.monotonic()
            if now >= nxt:
                self.scrapes.append(scrape(self.a.port, self.a.gpu))
                nxt += 1.0
            if now >= hi or (done and done()) or not self.g.alive():
                break
            time.sleep(max(0.0, min(nxt, hi, now + 0.05 if done else hi) - now))
        self.check()
        span = max(1e-6, time.monotonic() - t0)
        self.cpu_pct = (self.g.cpu() - c0) / span * 100
        # The same by thread kind: the launcher (gpufill-cudaN: the pacing thread), the
        # loop (gpufill-gpuN) and the rest (metrics server, signals, the main thread).
        th = self.g.threads_cpu()
        self.cpu_split = {}
        for name, secs in th.items():
            kind = ("launcher" if name.startswith("gpufill-cuda") else
                    "loop" if name.startswith("gpufill-gpu") else "other")
            self.cpu_split[kind] = (self.cpu_split.get(kind, 0.0)
                                    + (secs - th0.get(name, 0.0)) / span * 100)

    def pause(self):
        """SIGSTOP (`--toggle`'s alone phases): no kernel of ours is launched; our
        context stays."""
        self.check()
        os.kill(self.g.pid, signal.SIGSTOP)

    def resume(self):
        """SIGCONT (`--toggle`'s with-phases); its scrapes start again."""
        os.kill(self.g.pid, signal.SIGCONT)
        self.scrapes = []

    def window(self):
        """What the watch saw since gpufill started, or, with `--toggle`, since its last
        continue: its duty, estimate and CPU."""
        duty = [m[DUTY] for m in self.scrapes if DUTY in m]
        est = [m[EST] for m in self.scrapes if EST in m]
        return {"duty": mean(duty), "est": mean(est), "est_last": est[-1] if est else None,
                "cpu_pct": self.cpu_pct, "cpu_split": self.cpu_split,
                "scrapes": len(self.scrapes), "healthy": self.healthy}

    def life(self, pacing=True):
        """What gpufill's whole life gives, once it stopped: its reasons, what its estimate
        weighed against, its exit, and (unless `pacing` is false: with `--toggle` the
        counts span the stops) the pacing thread's counts."""
        lines = [line for _, line in self.g.lines]
        return {"pacing": pacing_counts(lines) if pacing else None, "weighing": weighing(lines),
                "rc": self.rc, "stop_s": round(self.stop_s, 3), "reasons": dict(reasons(lines))}

    def result(self):
        """A with-run's side results: its window and its gpufill's life."""
        return {**self.window(), **self.life()}


PACING_FIELDS = ("seconds", "kernels", "stretched", "probes", "queries", "sleeps")


def pacing_counts(lines):
    """What the gaps pacing thread did over its life, from its last "pacing thread
    stopped" line (RUST_LOG gpufill_cuda::pacing=debug): each field's rate a second, and
    the seconds; None without the line."""
    found = None
    for line in lines:
        if "pacing thread stopped" in line and re.search(r"cycle=\"?gaps", line):
            found = line
    if found is None:
        return None
    fields = dict(re.findall(r"(\w+)=([0-9.]+)", found))
    try:
        counts = {k: float(fields[k]) for k in PACING_FIELDS}
    except (KeyError, ValueError):
        return None
    secs = max(counts.pop("seconds"), 1e-9)
    return {"seconds": secs, **{k: v / secs for k, v in counts.items()}}


WEIGHED = re.compile(r'job_percent=([0-9.]+)\s+weighed_by="?(.+?)"?\s+ours_percent=')


def weighing(lines):
    """What the estimate divided its charge by, from the cost-bound lines (97b8d0e on):
    {"by": {source: count}, "job_pct": [the job's share, %, at each]}; None without one."""
    by, job = collections.Counter(), []
    for line in lines:
        m = WEIGHED.search(line) if "estimated cost to live work" in line else None
        if m:
            job.append(float(m.group(1)))
            by[m.group(2)] += 1
    return {"by": dict(by), "job_pct": job} if job else None


def sleep_until(t):
    time.sleep(max(0.0, t - time.monotonic()))


def unix(t):
    """A time.monotonic() value on the Unix clock (NVML's samples')."""
    return t + time.time() - time.monotonic()


def reason(line):
    """A log line as a reason: no time stamp, numbers blanked ("N")."""
    line = re.sub(r"^\d{4}-\d\d-\d\dT\S+Z\s+", "", line)
    return re.sub(r"\d+(\.\d+)?", "N", line).strip()


def reasons(lines):
    """Counts of the lines' reasons, start-up lines and blank ones left out."""
    return collections.Counter(reason(line) for line in lines
                               if line.strip() and not any(s in line for s in START_LINES))


# ------------------------------------------------------------------ runs
def phase_stats(reqs, seg, lo, hi):
    """Of the requests (t0, t1, segment) of `seg` that started in [lo, hi): n, rate (per
    s, of steps back to back), p50, mean and p99 (ms)."""
    ms = [(r[1] - r[0]) * 1e3 for r in reqs if r[2] == seg and lo <= r[0] < hi]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "rate": 1e3 * len(ms) / sum(ms), "p50": pct(ms, 50),
            "mean": statistics.mean(ms), "p99": pct(ms, 99)}


def finish_runs(a, name, runs, trace, clocks=None):
    """Each run's GPU utilization (the mean of NVML's samples in its window, once the
    trace has read past the last), then a line per run in gaps-runs.jsonl."""
    end = time.monotonic() + 2.5
    while trace.last / 1e6 < max(r["window"][1] for r in runs) and time.monotonic() < end:
        time.sleep(0.1)
    with open(os.path.join(a.out, "gaps-runs.jsonl"), "a") as f:
        for r in runs:
            r["util"] = mean(trace.between(*r["window"]))
            if clocks is not None:
                r["sm_mhz"] = mean(clocks.between(*r["window"]))
            f.write(json.dumps({"workload": name, **r}) + "\n")
    return runs


def run_plan(a, name, trace, clocks=None):
    """Alone and with, interleaved, in one worker process: (phases, runs)."""
    w = WORKLOADS[name]
    phases = interleave(a.pairs)
    seg = ({"kind": "requests", "secs": a.phase, "rate": w.rate} if w.rate
           else {"kind": "train", "secs": a.phase})
    opts = {"train_model": a.train_model, "batch": a.batch, "size": a.size,
            "wait_ms": a.wait_ms, "new_tokens": a.new_tokens}
    p, path, start = start_worker(a, [seg] * len(phases), w.model, module="gaps",
                                  extra=["--warmup", str(w.warmup), "--opts", json.dumps(opts)],
                                  lead=toggle_lead(a) if a.toggle else 1.0)
    try:
        if a.toggle:
            with Beside(a, name) as b:
                side = run_toggled(a, b, phases, start)
            side[max(i for i, v in enumerate(phases) if v)].update(b.life(pacing=False))
        else:
            side = run_restarted(a, name, phases, start)
        work = finish_worker(p, path)
    finally:
        if p.poll() is None:
            p.kill()
    runs = []
    for i, variant in enumerate(phases):
        lo, hi = start + i * a.phase + a.skip, start + (i + 1) * a.phase - 0.5
        runs.append({"phase": i, "variant": variant or "alone", "window": (unix(lo), unix(hi)),
                     **phase_stats(work["reqs"], i, lo, hi), **side[i]})
    return phases, finish_runs(a, name, runs, trace, clocks)


def run_restarted(a, name, phases, start):
    """A gpufill a with-phase, started at its start and stopped 0.3 s before its end,
    watched over its window; each phase's side results (with-phases: `Beside.result`)."""
    side = []
    for i, variant in enumerate(phases):
        p0 = start + i * a.phase
        sleep_until(p0)
        if variant:
            with Beside(a, name) as b:
                b.watch(p0 + a.skip, p0 + a.phase - 0.5)
                sleep_until(p0 + a.phase - 0.3)
            side.append(b.result())
        else:
            side.append({})
    return side


def toggle_lead(a):
    """Seconds from the worker's warm-up to its plan in `--toggle` mode: gpufill starts,
    waits the idle grace beside the job and fills for 4 s before the first phase."""
    return max(a.grace, 0.0) + 4.0


def run_toggled(a, b, phases, start):
    """`--toggle`: the phases with one gpufill (`b`, started): stopped through each alone
    phase from its start, continued at each with-phase's start and watched over its
    window; continued at the end, so that it can be stopped. Each phase's side results
    (with-phases: `Beside.window`)."""
    side = []
    try:
        for i, variant in enumerate(phases):
            p0 = start + i * a.phase
            sleep_until(p0)
            if variant:
                b.resume()
                b.watch(p0 + a.skip, p0 + a.phase - 0.5)
                side.append(b.window())
            else:
                b.pause()
                side.append({})
    finally:
        b.resume()
    return side


def run_arrive(a, trace, clocks=None):
    """A fresh process per run, told to go once gpufill fills (with) or at once (alone)."""
    phases = interleave(a.pairs)
    runs, child, spare = [], None, spawn_arrive(a)
    try:
        for i, variant in enumerate(phases):
            child, spare = spare, (spawn_arrive(a) if i + 1 < len(phases) else None)
            if "imported" not in child.stdout.readline():
                raise RuntimeError("the arrive job failed to start")
            side = {}
            if variant:
                with Beside(a, "arrive") as b:
                    filling = b.settle(a.settle)
                    child.stdin.write("go\n")
                    child.stdin.flush()
                    b.watch(time.monotonic(), time.monotonic() + 300, done=lambda: child.poll() is not None)
                side = {**b.result(), "filling_at_arrival": filling}
            else:
                child.stdin.write("go\n")
                child.stdin.flush()
            out = child.communicate(timeout=300)[0]
            t = json.loads(out.strip().splitlines()[-1])
            runs.append({"phase": i, "variant": variant or "alone", "window": (t["t0"], t["t2"]),
                         "time": t["t2"] - t["t0"], "loop": t["t2"] - t["t1"], **side})
    finally:
        for p in (child, spare):
            if p is not None and p.poll() is None:
                p.kill()
    return phases, finish_runs(a, "arrive", runs, trace, clocks)


# ------------------------------------------------------------------ summary
def cost_of(metric, ratio):
    """The job's cost from a with/alone ratio: 1 - ratio for a rate, ratio - 1 otherwise."""
    return 1 - ratio if metric in HIGHER_IS_BETTER else ratio - 1


def median_ci(xs, level=0.9):
    """A distribution-free confidence interval of the median of xs: the k-th smallest and
    k-th largest, with the largest k whose coverage is still at least `level` (the median
    lies below the k-th smallest only when k or more of n fair coin flips land one way),
    else (min, max). Returns (lo, hi, coverage); 5 values give (min, max) at 94 %, 15
    give the 4th from either end at 96 %."""
    xs = sorted(xs)
    n = len(xs)

    def coverage(k):  # of [xs[k], xs[n - 1 - k]]
        return 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n

    k = 0
    while k + 1 <= n - 2 - k and coverage(k + 1) >= level:
        k += 1
    return xs[k], xs[n - 1 - k], coverage(k)


def cost_ci(metric, ratios):
    """The cost's interval from the ratios' median interval ([`median_ci`]): (lo, hi,
    coverage)."""
    lo, hi, cover = median_ci(ratios)
    a, b = cost_of(metric, lo), cost_of(metric, hi)
    return min(a, b), max(a, b), cover


def verdict(cost, noise, bound, cis=None):
    """"ok" or "over" by the median cost; ", unresolved" unless the gated metrics' cost
    intervals (`cis`, [`cost_ci`]) all lie under the bound, or one lies over it (without
    intervals: unless the alone runs' noise is under the bound)."""
    if cost is None:
        return "-"
    word = "ok" if cost <= bound else "over"
    if cis:
        resolved = all(hi <= bound for _, hi, _ in cis) or any(lo > bound for lo, _, _ in cis)
    else:
        resolved = noise <= bound
    return word + ("" if resolved else ", unresolved")


def est_check(est, cost, noise):
    """Whether the estimate holds: cost - noise <= est <= 3 x cost + 0.01."""
    if est is None:
        return "missing"
    if cost is None:
        return "-"
    if est < cost - noise:
        return "under"
    return "holds" if est <= 3 * max(cost, 0.0) + 0.01 else "over"


def summarize(name, phases, runs):
    """Per metric: the alone median and spread, with/alone ratios (median, min, max), the
    cost and noise; the workload's cost (the worst gated metric), verdict, GPU alone and
    with, duty, estimate and its check, CPU, and the reasons summed over the with-runs."""
    w = WORKLOADS[name]
    out = {"metrics": {}, "pairs": sum(1 for p in phases if p)}
    for k in w.metrics:
        vals = [r.get(k) for r in runs]
        if any(v is None or v != v for v in vals):
            continue
        alone = [v for v, p in zip(vals, phases) if p is None]
        med = statistics.median(alone)
        ratios = neighbour_ratios(vals, phases)
        m = {"alone": med, "alone_spread": (min(alone) / med - 1, max(alone) / med - 1),
             "noise": (max(alone) - min(alone)) / 2 / med, "ratios": ratios,
             "ratio": spread(ratios), "cost": cost_of(k, statistics.median(ratios)),
             "cost_ci": cost_ci(k, ratios)}
        if k == "p99":
            m["diff_ms"] = neighbour_diffs(vals, phases)
        out["metrics"][k] = m
    gated = [out["metrics"][k] for k in w.gated if k in out["metrics"]]
    out["cost"] = max(m["cost"] for m in gated) if gated else None
    out["noise"] = max(m["noise"] for m in gated) if gated else 0.0
    out["bound"] = w.bound
    out["verdict"] = verdict(out["cost"], out["noise"], w.bound, [m["cost_ci"] for m in gated])
    p99 = out["metrics"].get("p99")
    if w.p99_ms is not None and p99:
        out["p99_diff_ms"] = statistics.median(p99["diff_ms"])
        if out["p99_diff_ms"] > w.p99_ms:
            out["verdict"] = out["verdict"].replace("ok", "over (p99)")
    withs = [r for r, p in zip(runs, phases) if p]
    out["util_alone"] = mean(r["util"] for r, p in zip(runs, phases) if p is None and r.get("util") is not None)
    out["util_with"] = mean(r["util"] for r in withs if r.get("util") is not None)
    out["mhz_alone"] = mean(r["sm_mhz"] for r, p in zip(runs, phases)
                            if p is None and r.get("sm_mhz") is not None)
    out["mhz_with"] = mean(r["sm_mhz"] for r in withs if r.get("sm_mhz") is not None)
    out["duty"] = mean(r["duty"] for r in withs if r.get("duty") is not None)
    out["est"] = mean(r["est"] for r in withs if r.get("est") is not None)
    out["est_check"] = est_check(out["est"], out["cost"], out["noise"])
    out["cpu_pct"] = mean(r["cpu_pct"] for r in withs if r.get("cpu_pct") is not None)
    out["cpu_split"] = {k: mean(r["cpu_split"].get(k, 0.0) for r in withs if r.get("cpu_split"))
                        for k in ("launcher", "loop", "other")}
    paced = [r["pacing"] for r in withs if r.get("pacing")]
    out["pacing"] = ({k: mean(p[k] for p in paced) for k in PACING_FIELDS[1:]}
                     if paced else None)
    weighed = [r["weighing"] for r in withs if r.get("weighing")]
    by = collections.Counter()
    for w_ in weighed:
        by.update(w_["by"])
    job = [x for w_ in weighed for x in w_["job_pct"]]
    out["weighing"] = ({"by": dict(by.most_common()), "job_pct": statistics.median(job)}
                       if job else None)
    total = collections.Counter()
    for r in withs:
        total.update(r.get("reasons", {}))
    out["reasons"] = dict(total.most_common())
    return out


def pc(x, sign=True):
    return "-" if x is None else f"{x * 100:+.2f}%" if sign else f"{x * 100:.2f}%"


def table(summaries, top=6):
    """The printed tables: cost per metric, then what gpufill got, then the reasons."""
    lines = [f"{'workload':12} {'metric':6} {'alone':>9} {'with/alone [min-max]':>25} "
             f"{'alone spread':>16} {'cost':>9} {'cost interval':>20} {'bound':>7}  unit; verdict"]
    for name, s in summaries.items():
        w = WORKLOADS[name]
        for k, m in s["metrics"].items():
            med, lo, hi = m["ratio"]
            cost, bound = pc(m["cost"]), pc(w.bound, False) if k in w.gated else ""
            if k == "p99" and w.p99_ms is not None:
                cost, bound = f"{s['p99_diff_ms']:+.3f}ms", f"+{w.p99_ms:g}ms"
            alone = f"{pc(m['alone_spread'][0])}..{pc(m['alone_spread'][1])}"
            clo, chi, cover = m["cost_ci"]
            interval = f"{pc(clo)}..{pc(chi)} ({cover * 100:.0f}%)"
            lines.append(f"{name:12} {k:6} {m['alone']:9.3f} {med:9.4f} [{lo:.4f}-{hi:.4f}] "
                         f"{alone:>16} {cost:>9} {interval:>20} {bound:>7}  {UNITS[k]}"
                         + (f"; {s['verdict']}" if k == w.gated[0] else ""))
    lines.append(f"\n{'workload':12} {'GPU alone':>9} {'GPU with':>9} {'duty':>6} "
                 f"{'est. cost':>9} {'estimate':>8} {'CPU %':>6}  pairs")
    for name, s in summaries.items():
        util = [f"{u:8.1f}%" if u is not None else f"{'-':>9}" for u in (s["util_alone"], s["util_with"])]
        duty = "-" if s["duty"] is None else f"{s['duty']:.3f}"
        cpu = "-" if s["cpu_pct"] is None else f"{s['cpu_pct']:.2f}"
        lines.append(f"{name:12} {util[0]} {util[1]} {duty:>6} {pc(s['est'], False) if s['est'] is not None else 'missing':>9} "
                     f"{s['est_check']:>8} {cpu:>6}  {s['pairs']}")
    for name, s in summaries.items():
        if s.get("mhz_alone") is not None and s.get("mhz_with") is not None:
            lines.append(f"{name}: SM clock (polled, mean) alone {s['mhz_alone']:.0f} MHz, "
                         f"with {s['mhz_with']:.0f} MHz")
        split = s.get("cpu_split") or {}
        if any(v is not None for v in split.values()):
            lines.append(f"{name}: CPU % by thread: " + ", ".join(
                f"{k} {v:.2f}" for k, v in split.items() if v is not None))
        paced = s.get("pacing")
        # The launcher's CPU is read by thread name over the watch window: a thread that
        # was started again in it reads as less than nothing, so no figure a kernel then.
        if paced and paced["kernels"] > 0 and (split.get("launcher") or 0) > 0:
            per = split["launcher"] / 100 * 1e6 / paced["kernels"]
            lines.append(f"{name}: launcher a second: {paced['kernels']:.0f} kernels "
                         f"({paced['stretched']:.0f} stretched), {paced['probes']:.1f} probe "
                         f"pairs, {paced['queries']:.0f} event queries, {paced['sleeps']:.0f} "
                         f"sleeps; {per:.1f} us of CPU a kernel")
        weighed = s.get("weighing")
        if weighed:
            lines.append(f"{name}: the estimate weighed against, at its bound crossings: "
                         + ", ".join(f"{k} {n}" for k, n in weighed["by"].items())
                         + f"; the job's share there, median {weighed['job_pct']:.1f} %")
    for name, s in summaries.items():
        lines.append(f"\n{name}: gpufill's log over the with-runs (count, line):")
        lines += [f"  {n:6d}  {text[:160]}" for text, n in list(s["reasons"].items())[:top]]
        if len(s["reasons"]) > top:
            lines.append(f"  ... {len(s['reasons']) - top} more in gpufill-{name}.log")
    return lines


# ------------------------------------------------------------------ plan and main
def auto_phase(names, pairs, budget):
    """The longest phase, 8-20 s in half seconds, for which `estimate` fits `budget`."""
    plan = [n for n in names if n != "arrive"]
    if not plan:
        return 15.0
    fixed = estimate(names, pairs, 0.0)
    phase = (budget - fixed) / (len(plan) * (2 * pairs + 1))
    return max(8.0, min(20.0, math.floor(phase * 2) / 2))


def estimate(names, pairs, phase, lead=0.0):
    """Seconds the runs take: each workload's start (and `lead`, `--toggle`'s wait before
    its plan), its phases (`arrive`'s runs ARRIVE_PHASE s each)."""
    n = 2 * pairs + 1
    return sum(WORKLOADS[w].startup + (0.0 if w == "arrive" else lead)
               + n * (ARRIVE_PHASE if w == "arrive" else phase) for w in names)


def missing_flags(help_text, args):
    """The `--flags` of `args` that `gpufill run --help` does not list."""
    return [x.split("=")[0] for x in args
            if x.startswith("--") and not re.search(re.escape(x.split("=")[0]) + r"(?![\w-])", help_text)]


def parse(argv):
    ap = parser("gaps", __doc__)
    ap.add_argument("--workloads", default="train-input,sub-ms,decode",
                    help=f"comma-separated, of {','.join(WORKLOADS)}")
    ap.add_argument("--pairs", type=int, default=5, help="with-runs per workload (one more alone)")
    ap.add_argument("--phase", type=float, default=0.0,
                    help="seconds a run (0: the longest up to 20 s that fits --budget)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds, for --phase 0")
    ap.add_argument("--grace", type=float, default=2.0,
                    help="gpufill's yield.idle_grace_s, s (negative: gpufill's own, no config)")
    ap.add_argument("--toggle", action="store_true",
                    help="one gpufill a workload, SIGSTOPped through the alone phases")
    ap.add_argument("--skip", type=float, default=None,
                    help="seconds left out at a run's start (default grace + 1.5, or 2)")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index")
    ap.add_argument("--gpufill", default=os.path.join(ROOT, "carry", "gpufill"))
    ap.add_argument("--gpufill-args", default="--beside-live fill-gaps --max-cost 2",
                    help="added to `gpufill run --gpus N --metrics ...` (one string)")
    ap.add_argument("--rust-log",
                    default="gpufill=info,gpufill_runtime=debug,gpufill_cuda::pacing=debug")
    ap.add_argument("--out", default=None, help="default $OUT, else /tmp/gpulab-gaps")
    ap.add_argument("--train-model", default="resnet18")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224, help="image side, px")
    ap.add_argument("--wait-ms", type=float, default=25.0, help="train-input's input wait")
    ap.add_argument("--new-tokens", type=int, default=32, help="decode's tokens a request")
    ap.add_argument("--arrive-iters", type=int, default=10000)
    ap.add_argument("--arrive-size", type=int, default=4096)
    ap.add_argument("--settle", type=float, default=4.0,
                    help="arrive: seconds at most for gpufill to fill before the job goes")
    ap.add_argument("--reasons", type=int, default=6, help="log lines printed per workload")
    ap.add_argument("--estimate", action="store_true", help="print the plan and its time only")
    a = ap.parse_args(argv)
    a.workloads = [w for w in a.workloads.split(",") if w]
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad or not a.workloads:
        ap.error(f"no workload {bad}: choose from {','.join(WORKLOADS)}")
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    a.gargs = shlex.split(a.gpufill_args)
    if a.toggle and "arrive" in a.workloads:
        ap.error("--toggle is not for arrive (its job is a newcomer to each with-run)")
    if a.toggle and a.grace < 0:
        ap.error("--toggle needs --grace of 0 or more (the plan waits it)")
    if a.skip is None:
        a.skip = 0.5 if a.toggle else a.grace + 1.5 if a.grace >= 0 else 2.0
    a.phase = a.phase or (4.0 if a.toggle else auto_phase(a.workloads, a.pairs, a.budget))
    if a.phase <= a.skip + 1:
        ap.error("--phase must exceed --skip by more than 1 s")
    a.port = PORT + a.gpu
    return a


def main(argv):
    a = parse(argv)
    est = estimate(a.workloads, a.pairs, a.phase, toggle_lead(a) if a.toggle else 0.0)
    print(f"gaps: GPU {a.gpu}, {','.join(a.workloads)}, {a.pairs} pairs, runs of {a.phase:g} s "
          f"(first {a.skip:g} s left out{'; one gpufill a workload, stopped when alone' if a.toggle else ''}), gpufill {' '.join(a.gargs)}, grace {a.grace:g} s; "
          f"estimated wall time {est / 60:.1f} min ({est:.0f} s)", flush=True)
    if a.estimate:
        return 0
    if not os.access(a.gpufill, os.X_OK):
        print(f"gaps: no gpufill at {a.gpufill} (build it here with scripts/build-carry.sh, "
              "carry `carry`)", file=sys.stderr)
        return 2
    helptext = subprocess.run([a.gpufill, "run", "--help"], capture_output=True, text=True).stdout
    missing = missing_flags(helptext, a.gargs)
    if missing:
        print(f"gaps: `{a.gpufill} run --help` lists no {' '.join(missing)}: a build without them?",
              file=sys.stderr)
        return 2
    a.out = a.out or out_dir("/tmp/gpulab-gaps")
    os.makedirs(a.out, exist_ok=True)
    a.work = f"/tmp/gaps-{a.gpu}"
    os.makedirs(a.work, exist_ok=True)
    a.env = gpu_env(a.gpu)
    from .physics import host_info
    host = host_info(str(a.gpu))
    host["gpufill"] = subprocess.run([a.gpufill, "--version"], capture_output=True,
                                     text=True).stdout.strip()
    print(f"gaps: {host.get('hostname')}: {host.get('gpu')}; {host['gpufill']}; compute policy: "
          f"{' '.join(str(host.get('compute_policy')).split())}", flush=True)
    if host.get("apps"):
        print(f"gaps: processes on the host's GPUs already: {host['apps']}", flush=True)
    t_all = time.monotonic()
    trace = UtilTrace(handle(a.gpu), every=1.0)
    # The SM clock too: a job that leaves the GPU mostly idle may run at lower clocks
    # alone than beside our kernels, which would hide a cost as a speed-up.
    clocks = ClockPoll(handle(a.gpu))
    res = {"args": {k: v for k, v in vars(a).items() if k != "env"}, "host": host, "workloads": {}}
    summaries = {}
    try:
        for name in a.workloads:
            t = time.monotonic()
            try:
                phases, runs = (run_arrive(a, trace, clocks) if name == "arrive"
                                else run_plan(a, name, trace, clocks))
            except Exception as e:  # one workload's failure leaves the others' runs
                print(f"gaps {name}: failed: {e!r}", flush=True)
                res["workloads"][name] = {"error": repr(e)}
                if isinstance(e, GpufillExited):
                    break  # it would for every workload
                continue
            finally:
                with open(os.path.join(a.out, "gaps-summary.json"), "w") as f:
                    json.dump(res, f, indent=1, default=str)
            s = summaries[name] = summarize(name, phases, runs)
            res["workloads"][name] = {"summary": s, "runs": runs}
            print(f"gaps {name}: cost {pc(s['cost'])} (noise {pc(s['noise'], False)}), {s['verdict']}; "
                  f"GPU {s['util_alone'] or 0:.1f} -> {s['util_with'] or 0:.1f} %; "
                  f"[{time.monotonic() - t:.0f} s]", flush=True)
    finally:  # also when cut short (SIGTERM): the workloads done so far
        trace.finish()
        clocks.finish()
        with open(os.path.join(a.out, "gaps-summary.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
        print()
        print("\n".join(table(summaries, a.reasons)))
        print(f"\ngaps: {time.monotonic() - t_all:.0f} s in all; details in {a.out}", flush=True)
    return 0
