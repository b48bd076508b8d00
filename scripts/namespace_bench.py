#!/usr/bin/env python3
"""Issue 14's GPU measurement: gpufill inside a PID namespace of its own against PyTorch jobs
started outside it, A/B interleaved with gpufill in the host's PID view.

`gpufill run --gpus 0 --target 50` runs either inside `unshare --pid --fork --mount-proc`
(view "namespace": NVML lists none of the jobs) or plainly (view "host"), and the jobs
always run in the host's namespace. They are forked from one zygote process that imported
torch once (and never touched CUDA), so a job's start is its fork and the first thing it
does is create its CUDA context, as a fresh `python -c 'import torch ...'` does after its
import (--no-zygote: one such process per job, slower). Jobs:
  compute  bf16 8192^3 matmul loop (it/s)
  light    four fp32 2048^3 matmuls, a sync and 20 ms of sleep per iteration: ~20 % busy
  holder   creates its context and stays idle (--holder-s), then exits
  costart  the compute loop, started --costart-after seconds after gpufill itself
Throughput runs go alone, with (namespace), alone, with (host), alone, ... so every "with"
run sits between two "alone" runs (--pairs pairs per view); its ratio is its rate over the
mean of those two.

Per run with gpufill, from gpufill's log (RUST_LOG=gpufill=debug, NO_COLOR=1) and an NVML
observer in the host view (every 20 ms; per-process samples of gpufill's host PID):
  idle_s       job start -> gpufill's first `yielding` line (its decision; the burst already
               queued, at most duty x 50 ms, may still run)
  ready_lead   how long before the job's context was ready that decision came (> 0: in time)
  fill_ms      time gpufill was filling while the job was there after its context was ready
  busy_smp     per-process samples of gpufill's PID with kernels, whose whole 200 ms window
               lies after the job's context was ready and before it exited
  refill_s     (holder) job exit -> gpufill filling again (the grace is 5 s)
Needs root (unshare), torch and pynvml, and an otherwise idle GPU 0. About 5-7 minutes.
Usage: python3 scripts/namespace_bench.py --gpufill carry/gpufill --out $OUT
"""
import argparse, datetime, json, os, re, signal, statistics, subprocess, sys, threading, time

JOB = r'''
import json, os, signal, sys, time
import torch                                 # once; CUDA untouched here, so children may fork

def job(req):
    r = {"start": time.time(), "kind": req["kind"]}
    torch.cuda.init(); x = torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    r["ready"] = time.time()
    kind, seconds = req["kind"], req["seconds"]
    if kind == "holder":
        time.sleep(seconds)
    else:
        if kind == "light":
            a = torch.randn(2048, 2048, device="cuda")
            def step():
                for _ in range(4):
                    a @ a
                torch.cuda.synchronize(); time.sleep(0.02)
        else:
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            def step():
                a @ a
        torch.cuda.synchronize()
        r["work"] = time.time()
        t_end = r["work"] + 1.0              # warm-up, not counted
        while time.time() < t_end:
            step()
        torch.cuda.synchronize()
        t0 = time.time(); it = 0
        while time.time() - t0 < seconds:
            step(); it += 1
        torch.cuda.synchronize()
        r["rate"] = it / (time.time() - t0)
    r["end"] = time.time()
    tmp = req["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(r, f)
    os.rename(tmp, req["out"])
'''

# One process per job, torch imported first (--no-zygote): the job's start is after
# the import, right before its context, as with the zygote.
STANDALONE = JOB + r'''
job(json.loads(sys.argv[1]))
'''

ZYGOTE = JOB + r'''
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked jobs are reaped by the kernel
print("READY", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            job(req)
        finally:
            os._exit(0)
    print(json.dumps({"pid": pid}), flush=True)
'''

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)\s+(\w+)\s+(.*)$")


def log_time(stamp):
    whole, _, frac = stamp.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def parse_log(path):
    """gpufill's state changes and notable lines: (time, kind, message)."""
    events = []
    for line in open(path, errors="replace"):
        m = LOG_LINE.match(line.strip())
        if not m:
            continue
        t, level, rest = log_time(m.group(1)), m.group(2), m.group(3)
        msg = rest.split(": ", 1)[1] if rest.startswith("gpu{") and ": " in rest else rest
        if level == "INFO" and msg.startswith("filling"):
            events.append((t, "filling", msg))
        elif level == "INFO" and msg.startswith("yielding"):
            events.append((t, "yielding", msg))
        elif "context ready" in msg or "PID view" in msg or level in ("WARN", "ERROR"):
            events.append((t, "note", msg))
    return events


class Observer(threading.Thread):
    """The host's NVML view every 20 ms: compute processes and per-process samples."""

    def __init__(self, gpu):
        super().__init__(daemon=True)
        self.gpu, self.rows, self.samples, self.done = gpu, [], [], False

    def run(self):
        import pynvml as N
        N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(self.gpu); last = 0
        while not self.done:
            t = time.time()
            procs = [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
            try:
                got = N.nvmlDeviceGetProcessUtilization(h, last)
                for x in got:
                    if x.timeStamp > last and x.smUtil <= 100:
                        self.samples.append((x.pid, x.smUtil, x.timeStamp / 1e6))
                if got:
                    last = max(last, max(x.timeStamp for x in got))
            except N.NVMLError:
                pass
            self.rows.append((t, procs))
            time.sleep(0.02)

    def listed(self, t0, t1):
        return [(t, p) for t, p in self.rows if t0 <= t <= t1]


class Bench:
    def __init__(self, a):
        self.a, self.trials, self.t_start = a, [], time.time()
        self.env = dict(os.environ, NO_COLOR="1", RUST_LOG="gpufill=debug")
        self.zygote = None
        if not a.no_zygote:
            self.zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True)
            if self.zygote.stdout.readline().strip() != "READY":
                raise SystemExit("the job zygote did not start (is torch installed?)")
        self.obs = Observer(a.gpu)
        self.obs.start()
        self.n = 0

    def spawn(self, kind, seconds):
        self.n += 1
        out = os.path.join(self.a.out, f"job-{self.n:03d}-{kind}.json")
        req = json.dumps({"kind": kind, "seconds": seconds, "out": out})
        if self.zygote is None:
            return subprocess.Popen([sys.executable, "-c", STANDALONE, req]).pid, out
        self.zygote.stdin.write(req + "\n")
        self.zygote.stdin.flush()
        pid = json.loads(self.zygote.stdout.readline())["pid"]
        return pid, out

    def wait_job(self, pid, out, limit):
        t_end = time.time() + limit
        while time.time() < t_end and os.path.exists(f"/proc/{pid}"):
            try:                         # a standalone job is our child: reap it
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:
                pass
            time.sleep(0.01)
        exit_t = time.time()
        if not os.path.exists(out):
            raise SystemExit(f"job {pid} gave no result ({out})")
        r = json.load(open(out))
        r["exit"], r["pid"] = exit_t, pid
        return r

    def start_gpufill(self, view, tag):
        log = os.path.join(self.a.out, f"{tag}-gpufill.log")
        cmd = [self.a.gpufill, "run", "--gpus", str(self.a.gpu), "--target", str(self.a.target),
               "--duration", "120"]
        if self.a.config:
            cmd += ["--config", self.a.config]
        if view == "namespace":
            cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] + cmd
        f = open(log, "w")
        p = subprocess.Popen(cmd, stderr=f, stdout=f, env=self.env)
        return p, log, time.time()

    def gpufill_pid(self, p, view):
        if view == "host":
            return p.pid
        for _ in range(200):
            try:
                kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                pass
            time.sleep(0.01)
        return None

    def wait_filling(self, log, limit=15.0):
        t_end = time.time() + limit
        while time.time() < t_end:
            if any(k == "filling" for _, k, _ in parse_log(log)):
                return True
            time.sleep(0.05)
        return False

    def stop_gpufill(self, p, pid):
        try:
            os.kill(pid or p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()

    def alone(self, kind, seconds):
        pid, out = self.spawn(kind, seconds)
        r = self.wait_job(pid, out, seconds + 60)
        self.trials.append({"view": "alone", "job": kind, "result": r})
        return r

    def with_gpufill(self, view, kind, seconds, costart_after=None):
        tag = f"run-{self.n + 1:03d}-{view}-{kind}"
        p, log, launched = self.start_gpufill(view, tag)
        gpid = self.gpufill_pid(p, view)
        if costart_after is None:
            if not self.wait_filling(log):
                self.stop_gpufill(p, gpid)
                raise SystemExit(f"gpufill never filled; see {log}")
            time.sleep(1.5)              # let the controller settle at the target
        else:
            time.sleep(max(0.0, launched + costart_after - time.time()))
        pid, out = self.spawn(kind, seconds)
        r = self.wait_job(pid, out, seconds + 60)
        after = 7.0 if kind == "holder" else 1.0
        time.sleep(after)                # the grace, to see it fill again (holder)
        self.stop_gpufill(p, gpid)
        time.sleep(0.3)                  # late per-process samples
        trial = {"view": view, "job": kind, "result": r, "gpufill_pid": gpid, "log": log,
                 "launched": launched, "events": parse_log(log)}
        trial.update(self.judge(trial))
        self.trials.append(trial)
        return trial

    def judge(self, tr):
        r, ev, gpid = tr["result"], tr["events"], tr["gpufill_pid"]
        start, ready, exit_t = r["start"], r["ready"], r["exit"]
        states = [(t, k) for t, k, _ in ev if k in ("filling", "yielding")]
        idle = next((t for t, k in states if k == "yielding" and t >= start - 0.005), None)

        def filling_ms(t0, t1):
            total, state, since = 0.0, None, t0
            for t, k in states:
                if t <= t0:
                    state = k
                    continue
                if t >= t1:
                    break
                if state == "filling":
                    total += t - since
                state, since = k, t
            if state == "filling":
                total += t1 - since
            return 1e3 * total

        busy = [s for s in self.obs.samples
                if s[0] == gpid and s[1] > 0 and s[2] - 0.2 >= ready and s[2] <= exit_t]
        refill = next((t for t, k in states if k == "filling" and t >= exit_t), None)
        listed = [t for t, procs in self.obs.listed(start, exit_t) if any(pp == r["pid"] for pp, _ in procs)]
        own = [m for _, k, m in ev if k == "note" and "context ready" in m]
        return {
            "idle_s": None if idle is None else idle - start,
            "ready_lead_s": None if idle is None else ready - idle,
            "ready_s": ready - start,
            "fill_ms": filling_ms(ready, exit_t),
            "fill_ms_from_start": filling_ms(start, exit_t),
            "busy_smp": len(busy),
            "refill_s": None if refill is None else refill - exit_t,
            "host_listed_s": None if not listed else listed[0] - start,
            "context_ready_line": own[-1] if own else None,
        }

    def elapsed(self):
        return time.time() - self.t_start

    def close(self):
        self.obs.done = True
        if self.zygote:
            self.zygote.stdin.close()
            self.zygote.wait(timeout=10)


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpufill", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/namespace_bench"))
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--target", type=float, default=50)
    ap.add_argument("--config", help="a gpufill config file (e.g. [yield] policy = \"activity\")")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per throughput run")
    ap.add_argument("--pairs", type=int, default=3, help="with/alone pairs per view and job")
    ap.add_argument("--holder-s", type=float, default=6.0)
    ap.add_argument("--costart-after", type=float, nargs="+", default=[0.3, 0.6])
    ap.add_argument("--budget-s", type=float, default=450, help="skip what would start after this")
    ap.add_argument("--no-zygote", action="store_true",
                    help="one python process per job instead of forking (if fork after import torch misbehaves; slower)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"]).returncode != 0:
        raise SystemExit("cannot create a PID namespace (unshare needs root)")
    b = Bench(a)
    time.sleep(0.5)
    busy = [p for _, procs in b.obs.rows[-3:] for p in procs]
    if busy:
        print(f"warning: GPU {a.gpu} already has compute processes {busy}", file=sys.stderr)
    views = ["namespace", "host"]
    skipped = []

    def budget(what):
        if b.elapsed() > a.budget_s:
            skipped.append(what)
            return False
        print(f"[{b.elapsed():6.1f} s] {what}", file=sys.stderr, flush=True)
        return True

    # Throughput: alone, with (namespace), alone, with (host), alone, ...
    for kind in ("compute", "light"):
        if budget(f"{kind}: alone"):
            b.alone(kind, a.seconds)
        for i in range(a.pairs):
            for view in views:
                if budget(f"{kind}: with gpufill ({view}), pair {i + 1}"):
                    b.with_gpufill(view, kind, a.seconds)
                if budget(f"{kind}: alone"):
                    b.alone(kind, a.seconds)
    for i in range(2):
        for view in views:
            if budget(f"holder ({view}) {i + 1}"):
                b.with_gpufill(view, "holder", a.holder_s)
    for after in a.costart_after:
        for view in views:
            if budget(f"costart {after} s ({view})"):
                b.with_gpufill(view, "costart", a.seconds, costart_after=after)
    b.close()

    # Ratios: each "with" run against the mean of its neighbouring "alone" runs.
    for i, tr in enumerate(b.trials):
        if tr["view"] in views and tr["job"] in ("compute", "light"):
            before = next((t for t in reversed(b.trials[:i]) if t["view"] == "alone" and t["job"] == tr["job"]), None)
            after = next((t for t in b.trials[i + 1:] if t["view"] == "alone" and t["job"] == tr["job"]), None)
            near = [t["result"]["rate"] for t in (before, after) if t]
            tr["ratio"] = tr["result"]["rate"] / statistics.mean(near) if near else None

    rows = []
    print(f"\ngpufill {a.gpufill}, target {a.target} %, GPU {a.gpu}; times in s from each job's start")
    head = f"{'view':9s} {'job':8s} {'n':>2s} {'idle_s':>7s} {'ready_lead':>10s} {'fill_ms':>8s} {'busy_smp':>8s} {'refill_s':>8s} {'ratio med [min-max]':>24s}"
    print(head)
    for kind in ("compute", "light", "holder", "costart"):
        for view in views:
            ts = [t for t in b.trials if t["view"] == view and t["job"] == kind]
            if not ts:
                continue
            med = lambda k: statistics.median([t[k] for t in ts if t.get(k) is not None]) if any(t.get(k) is not None for t in ts) else None
            worst = lambda k: max((t[k] for t in ts if t.get(k) is not None), default=None)
            ratios = [t["ratio"] for t in ts if t.get("ratio") is not None]
            rs = f"{statistics.median(ratios):.4f} [{min(ratios):.4f}-{max(ratios):.4f}]" if ratios else "-"
            never = sum(1 for t in ts if t["idle_s"] is None)
            row = (f"{view:9s} {kind:8s} {len(ts):2d} {fmt(med('idle_s')):>7s} {fmt(min((t['ready_lead_s'] for t in ts if t['ready_lead_s'] is not None), default=None)):>10s} "
                   f"{fmt(worst('fill_ms'), '.0f'):>8s} {sum(t['busy_smp'] for t in ts):8d} {fmt(med('refill_s'), '.2f'):>8s} {rs:>24s}"
                   + (f"  ({never} never yielded)" if never else ""))
            print(row)
            rows.append(row)
    print("idle_s: median; ready_lead: smallest (negative: after the job's context was ready); "
          "fill_ms: largest; busy_smp: total; refill_s: median")
    alone = {k: [t["result"]["rate"] for t in b.trials if t["view"] == "alone" and t["job"] == k] for k in ("compute", "light")}
    for k, v in alone.items():
        if v:
            print(f"alone {k}: {len(v)} runs, median {statistics.median(v):.2f} it/s [{min(v):.2f}-{max(v):.2f}]")
    for tr in b.trials:
        if tr["view"] in views and tr.get("context_ready_line") and tr["job"] == "costart":
            print(f"costart ({tr['view']}): {tr['context_ready_line']}")
    if skipped:
        print(f"skipped for time: {skipped}")
    with open(os.path.join(a.out, "namespace_bench.json"), "w") as f:
        json.dump({"args": vars(a), "trials": b.trials, "table": rows,
                   "samples": b.obs.samples, "elapsed_s": b.elapsed()}, f, indent=1, default=str)
    print(f"details: {os.path.join(a.out, 'namespace_bench.json')} and the gpufill logs beside it "
          f"({b.elapsed():.0f} s)")


if __name__ == "__main__":
    main()
