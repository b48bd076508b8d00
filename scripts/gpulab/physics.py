"""`physics`: time-slicing between two CUDA contexts (no MPS), read off %globaltimer.

Three processes on one GPU: this one (it only orchestrates and analyses) and two children
of its own, each one CUDA context (CuPy):

- "ours", a filler: a RawKernel of 1 block x 32 threads whose lane 0 spins on
  `%globaltimer` for L us and writes its first and last read (ns) into a device ring (slot
  from an atomic counter, so graph replays need no argument). Modes:
  - `queued`: the stream kept full. Batches of about `--batch-us` of kernels (a CUDA graph
    of B launches, plain launches with `--no-graph`), an event after each; a new batch
    waits for the event of the batch `depth` batches back, so `--ahead-us` or more of our
    work is always queued;
  - `gaps`: one kernel at a time: launch, synchronize, then spin the host until 2L after
    the launch (at once where the round trip took longer): about 50 % duty from 50 us on;
    at 10-25 us the launch-synchronize round trip (~20 us) is the gap;
  - `serial`: one at a time with no host gap (launch, synchronize, launch): 100 % duty as a
    filler that syncs each kernel reaches it, yet the stream is empty between kernels.
  `alone` cells run no kernel of ours; the first alone cell runs before our context
  exists (ctx none), the others beside its idle context (ctx idle).
- "job": every random 5-20 ms (`--every-ms`) launches a tiny kernel (1 block x 32, lane 0
  writes its globaltimer at start and end; `--job-us` spins it longer) and synchronizes;
  it records the host time before the launch (ta) and after the synchronize (tb,
  CLOCK_MONOTONIC ns): the latency is tb - ta.

%globaltimer is one clock for the whole GPU, so both children's stamps compare directly.
Where the job's kernel "arrived" needs the host clock in globaltimer terms: before and
after each cell, with ours idle, the job runs `--calib` tight launch-synchronize rounds
and takes hi = min(g - ta) over them (g: the kernel's globaltimer start). hi is the
offset between the clocks plus the quickest launch-to-start on a free GPU, so
ready = ta + hi is the earliest the job's kernel could have started had the GPU been its
own. hi is interpolated linearly in time between the two calibrations (the clocks drifted
7-9 ppm apart on an H200, 10-15 us over a cell; each cell's drift is printed); lo =
max(g - tb) bounds the true offset from below, so hi - lo bounds the quickest
launch-to-start plus the calibration's error. The alone cells' wait (start - ready) is
the control: launch latency beyond the tight loop's, ~55 us at p50 on an H200 after 5-20
ms of idle. ready can be that much early, so a `raced` row may be a job whose launch
reached the GPU just after our next kernel's.

Per job request, from our kernels' stamps (sorted by end) S, E:
- wait = job start - ready; the first of ours ending after ready and the last ending
  before the job's start;
- kind `met`: one of ours was running at ready and the job ran after it ended;
  `raced`: the GPU was free of ours at ready, but a kernel of ours started after ready and
  ran first; `free`: none of ours ran between ready and the job's start;
  `preempted`: a kernel of ours spans the job's kernel (it was switched out mid-kernel:
  its stamps cannot say when), `overlap`: a kernel of ours only partly overlaps it
  (concurrent execution: MPS, or a clock that is not one);
- rem = end of the first of ours ending after ready - ready (the remainder of the kernel
  running at arrival); beyond = job start - that end; beyond = more + switch, more being
  our further kernels that ran before the job (n_more of them) and switch = job start -
  the last of ours' end before it (the context switch, as seen from our last instruction
  to the job's first); for `free` rows, since = job start - our last end;
  for `preempted`, ran = job start - max(ready, that kernel's start).

Answers: (1) met waits against rem + switch, by L and mode; (2) n_more and beyond,
queued against gaps/serial: 0 and ~switch means the job got in at the end of our
kernel; (3) switch p50/p90 over met and raced rows, and free rows' wait over alone's
(switching in after our context went idle); (4) `nvidia-smi compute-policy -l` (read only).

Cells: alone, then every mode x L (`--modes`, `--lengths`), then alone, for each of
`--rounds` rounds, the order reversed every other round; `--requests` requests per cell
and round. The defaults (3 modes x 5 lengths, 300 requests, 2 rounds) take about 2.5
minutes. Prints a line per cell as it ends, then the pooled table (us) and the answers;
writes $OUT (or --out)/physics-rows.csv (a row per request) and physics-summary.json
(host, GPU, driver, compute policy, calibrations, per-cell and pooled statistics), both
rewritten as cells end. It changes no GPU setting.

  python3 scripts/lab.py physics --gpu 1 --out "$OUT"      # NVML index or UUID
  bash scripts/physics_session.sh 1                         # the same, packed into one file
"""
import bisect
import csv
import json
import os
import queue
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from array import array

from .lib import fmt, gpu_env, mean, out_dir, parser, pct, python_child

KERNELS = r"""
__device__ __forceinline__ unsigned long long gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void ours(unsigned long long ns, unsigned long long* ring,
                                unsigned int* count, unsigned int mask) {
    if (threadIdx.x != 0) return;
    unsigned long long t0 = gt(), t;
    do { t = gt(); } while (t - t0 < ns);
    unsigned int i = atomicAdd(count, 1u) & mask;
    ring[2 * i] = t0;
    ring[2 * i + 1] = t;
}
extern "C" __global__ void job(unsigned long long ns, unsigned long long* ring, unsigned int i) {
    if (threadIdx.x != 0) return;
    unsigned long long t0 = gt(), t;
    do { t = gt(); } while (t - t0 < ns);
    ring[2 * i] = t0;
    ring[2 * i + 1] = t;
}
"""
RING = 1 << 22  # our kernels' slots per cell: 10 s of 10 us kernels fit
MODES = ("queued", "gaps", "serial")
KINDS = ("met", "raced", "free", "preempted", "overlap")


# ------------------------------------------------------------------ analysis (pure)
def calibration(samples):
    """The clocks' offset from [(ta, tb, g)]: host ns before the launch and after the
    synchronize, the kernel's globaltimer start. hi = min(g - ta) (offset plus the
    quickest launch-to-start), t = the ta it was taken at, lo = max(g - tb) (below the
    true offset); p10 of g - ta says how often the quickest recurs."""
    d = [g - ta for ta, _, g in samples]
    best = min(range(len(d)), key=d.__getitem__)
    return {"t": samples[best][0], "hi": d[best], "lo": max(g - tb for _, tb, g in samples),
            "p10": pct(d, 10), "n": len(samples)}


def offset_at(before, after, t):
    """hi at host time t (ns, an int: a float at 1e18 ns keeps only ~128 ns), linear
    between two calibrations and beyond them."""
    if not after or after["t"] == before["t"]:
        return before["hi"]
    return before["hi"] + round((t - before["t"]) * (after["hi"] - before["hi"])
                                / (after["t"] - before["t"]))


def drift_ppm(before, after):
    """How fast globaltimer runs against the host clock, parts per million."""
    if not after or after["t"] == before["t"]:
        return None
    return (after["hi"] - before["hi"]) / (after["t"] - before["t"]) * 1e6


def decompose(ready, js, je, S, E):
    """One job request against our kernels (S, E: starts and ends, sorted by end, ns):
    its kind and wait decomposition, us (see the module's text)."""
    us = 1e3
    n = len(E)
    first = bisect.bisect_right(E, ready)  # first of ours ending after ready
    last = bisect.bisect_right(E, js) - 1  # last of ours ending before the job started
    done = last - first + 1  # ours that ended between ready and the job's start
    r = {"kind": "free", "wait_us": (js - ready) / us, "n_done": max(0, done), "rem_us": None,
         "beyond_us": None, "more_us": None, "n_more": None, "switch_us": None,
         "since_us": None, "ran_us": None}
    nxt = last + 1
    if nxt < n and S[nxt] < je:  # one of ours was resident during the job's kernel
        spans = S[nxt] <= js and E[nxt] >= je
        r["kind"] = "preempted" if spans else "overlap"
        r["ran_us"] = (js - max(ready, S[nxt])) / us
    elif done >= 1:
        r["kind"] = "met" if S[first] <= ready else "raced"
        r["switch_us"] = (js - E[last]) / us
        r["n_more"] = done - 1
        r["more_us"] = (E[last] - E[first]) / us
        r["beyond_us"] = (js - E[first]) / us
        if r["kind"] == "met":
            r["rem_us"] = (E[first] - ready) / us
    elif last >= 0:
        r["since_us"] = (js - E[last]) / us
    return r


def ours_stats(pairs, length_us):
    """Our kernels of one cell, [(start, end)] sorted by end: count, duty over their span,
    duration and gap percentiles (us), and how many ran long (stretched: switched out
    mid-kernel, or started late by more than 20 us + 20 %)."""
    if not pairs:
        return {"n": 0}
    dur = [(e - s) / 1e3 for s, e in pairs]
    gaps = [(pairs[i + 1][0] - pairs[i][1]) / 1e3 for i in range(len(pairs) - 1)]
    span = pairs[-1][1] - pairs[0][0]
    return {"n": len(pairs), "duty": sum(dur) * 1e3 / span if span > 0 else None,
            "dur_p50_us": pct(dur, 50), "dur_p99_us": pct(dur, 99), "dur_max_us": max(dur),
            "gap_p50_us": pct(gaps, 50) if gaps else None,
            "gap_p90_us": pct(gaps, 90) if gaps else None,
            "stretched": sum(d > length_us * 1.2 + 20 for d in dur)}


def analyze(job, before, after, pairs):
    """Rows of one cell: `job` = {"ta", "tb", "js", "je"} (lists, ns), calibrations before
    and after, our kernels [(start, end)] sorted by end."""
    S = [p[0] for p in pairs]
    E = [p[1] for p in pairs]
    rows = []
    for i, (ta, tb, js, je) in enumerate(zip(job["ta"], job["tb"], job["js"], job["je"])):
        ready = ta + offset_at(before, after, ta)
        r = {"i": i, "lat_us": (tb - ta) / 1e3, "ta": ta, "tb": tb, "ready": ready, "js": js,
             "je": je}
        r.update(decompose(ready, js, je, S, E))
        rows.append(r)
    return rows


def _p(rows, key, q):
    xs = [r[key] for r in rows if r.get(key) is not None]
    return pct(xs, q) if xs else None


def summarize(rows, alone=None):
    """Statistics of a cell's rows (us): latency, wait, kinds, decomposition; with `alone`
    (the alone cells' summary), the latency's delta to it."""
    n = len(rows)
    s = {"n": n}
    if not n:
        return s
    for q in (50, 90, 99):
        s[f"lat_p{q}"] = _p(rows, "lat_us", q)
        s[f"wait_p{q}"] = _p(rows, "wait_us", q)
    s["lat_max"] = max(r["lat_us"] for r in rows)
    s["lat_mean"] = mean(r["lat_us"] for r in rows)
    s["wait_max"] = max(r["wait_us"] for r in rows)
    for k in KINDS:
        s[f"share_{k}"] = sum(r["kind"] == k for r in rows) / n
    met = [r for r in rows if r["kind"] == "met"]
    blocked = [r for r in rows if r["kind"] in ("met", "raced")]
    free = [r for r in rows if r["kind"] == "free"]
    pre = [r for r in rows if r["kind"] == "preempted"]
    for q in (50, 90):
        s[f"met_wait_p{q}"] = _p(met, "wait_us", q)
        s[f"rem_p{q}"] = _p(met, "rem_us", q)
        s[f"beyond_p{q}"] = _p(met, "beyond_us", q)
        s[f"switch_p{q}"] = _p(blocked, "switch_us", q)
        s[f"free_wait_p{q}"] = _p(free, "wait_us", q)
        s[f"pre_wait_p{q}"] = _p(pre, "wait_us", q)
    s["switch_p10"] = _p(blocked, "switch_us", 10)
    s["n_more_p50"] = _p(met, "n_more", 50)
    s["n_more_max"] = max((r["n_more"] for r in met), default=None)
    s["more_p50"] = _p(met, "more_us", 50)
    s["free_since_p50"] = _p(free, "since_us", 50)
    s["pre_ran_p50"] = _p(pre, "ran_us", 50)
    s["pre_wait_p10"] = _p(pre, "wait_us", 10)
    s["pre_wait_max"] = max((r["wait_us"] for r in pre), default=None)
    # A job that arrives at a random time into our time slice waits its rest: uniform, so
    # (p90 - p10) / 0.8 of the preempted waits is the slice.
    if len(pre) >= 20:
        s["slice_est_us"] = (s["pre_wait_p90"] - s["pre_wait_p10"]) / 0.8
    if alone and alone.get("n"):
        for q in (50, 90, 99):
            s[f"d_lat_p{q}"] = s[f"lat_p{q}"] - alone[f"lat_p{q}"]
        s["d_free_wait_p50"] = (s["free_wait_p50"] - alone["wait_p50"]
                                if s["free_wait_p50"] is not None else None)
    return s


HEAD = (f"{'cell':13} {'n':>4} {'lat50':>6} {'lat90':>6} {'lat99':>6} {'max':>6} "
        f"{'d50':>6} {'d99':>6} | {'wait50':>6} {'wait99':>6} | {'met%':>4} {'race%':>5} "
        f"{'pre%':>4} {'free%':>5} | {'rem50':>6} {'bey50':>6} {'sw50':>5} {'nmore':>5} | "
        f"{'duty%':>5}")


def table_line(name, s, ours=None):
    """One line of the table (us): see HEAD."""
    def c(key, w=6, p=1):
        v = s.get(key)
        return f"{fmt(float(v) if v is not None else None, p):>{w}}"

    def share(key, w=4):
        return f"{100 * s.get(key, 0):>{w}.0f}"
    duty = (ours or {}).get("duty")
    return (f"{name:13} {s['n']:>4} {c('lat_p50')} {c('lat_p90')} {c('lat_p99')} "
            f"{c('lat_max')} {c('d_lat_p50')} {c('d_lat_p99')} | {c('wait_p50')} "
            f"{c('wait_p99')} | {share('share_met')} {share('share_raced', 5)} "
            f"{share('share_preempted')} {share('share_free', 5)} | {c('rem_p50')} {c('beyond_p50')} {c('switch_p50', 5)} "
            f"{c('n_more_p50', 5, 0)} | {fmt(100 * duty if duty is not None else None, 1):>5}")


def answers(pooled, policy):
    """The four questions' lines from the pooled summaries {cell name: summary}."""
    cells = [(k, s) for k, s in pooled.items() if k != "alone" and s.get("n")]
    out = ["1. a job's kernel that met one of ours: wait against our remainder and what came "
           "beyond it (us, p50s)"]
    for name, s in cells:
        out.append(f"   {name:12} met {100 * s['share_met']:3.0f} %: wait {fmt(s['met_wait_p50'])}"
                   f", rem {fmt(s['rem_p50'])}, beyond {fmt(s['beyond_p50'])} (ours after it "
                   f"{fmt(s['n_more_p50'], 0)}, switch {fmt(s['switch_p50'])}); raced "
                   f"{100 * s['share_raced']:3.0f} %; preempted {100 * s['share_preempted']:3.0f} %"
                   f", wait p10/p50/p90/max {fmt(s['pre_wait_p10'])}/{fmt(s['pre_wait_p50'])}/"
                   f"{fmt(s['pre_wait_p90'])}/{fmt(s['pre_wait_max'])}"
                   + (f" (a time slice of {fmt(s['slice_est_us'], 0)})" if s.get("slice_est_us")
                      else ""))
    out.append("2. in at the end of the kernel it met? ours after it p50/max, beyond p50 (us), by L")
    for length in sorted({float(k.split()[1]) for k, _ in cells}):
        parts = [f"{mode} {fmt(s['n_more_p50'], 0)}/{fmt(s['n_more_max'], 0)} "
                 f"{fmt(s['beyond_p50'])}" for mode in MODES
                 for s in [pooled.get(cell_name(mode, length))] if s and s.get("n")]
        out.append(f"   L={length:<4g} " + "; ".join(parts))
    out.append("3. switch (our last end -> the job's start), p10/p50/p90 us: " + "; ".join(
        f"{k} {fmt(s['switch_p10'])}/{fmt(s['switch_p50'])}/{fmt(s['switch_p90'])}"
        for k, s in cells if s.get("switch_p50") is not None))
    out.append(f"   wait of free rows (ours idle at arrival) p50, alone's {fmt(pooled.get('alone', {}).get('wait_p50'))}: "
               + "; ".join(f"{k} {fmt(s['free_wait_p50'])} (ours idle for {fmt(s['free_since_p50'])})"
                           for k, s in cells if s.get("free_wait_p50") is not None))
    lines = [x.strip(" |") for x in (policy or "").splitlines() if x.strip(" |+-=")]
    out.append("4. compute policy: " + (" | ".join(lines) or "not read"))
    return out


# ------------------------------------------------------------------ the children
def _commands():
    """stdin's lines in a queue, read by a thread (None at EOF)."""
    q = queue.Queue()

    def read():
        for line in sys.stdin:
            q.put(line.split())
        q.put(None)
    threading.Thread(target=read, daemon=True).start()
    return q


def _say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def ours_main(argv):
    """Our filler's process: `start MODE L_US` launches until `stop PATH` (then it writes
    the cell's stamps to PATH and says how many); `quit` or EOF ends it."""
    import cupy as cp
    ahead_us, batch_us, use_graph = float(argv[0]), float(argv[1]), argv[2] == "graph"
    s = cp.cuda.Stream(non_blocking=True)
    s.use()
    mod = cp.RawModule(code=KERNELS)
    k = mod.get_function("ours")
    ring = cp.zeros(2 * RING, dtype=cp.uint64)
    count = cp.zeros(1, dtype=cp.uint32)
    mask = cp.uint32(RING - 1)
    graphs = {}

    def launch(ns):
        k((1,), (32,), (ns, ring, count, mask), stream=s)

    for _ in range(10):
        launch(cp.uint64(1000))
    s.synchronize()
    cmds = _commands()
    _say({"ready": True})
    while True:
        cmd = cmds.get()
        if not cmd or cmd[0] == "quit":
            return
        if cmd[0] != "start":
            _say({"error": f"unexpected {cmd}"})
            continue
        mode, length = cmd[1], float(cmd[2])
        ns = cp.uint64(int(length * 1e3))
        count.fill(0)
        s.synchronize()
        meta = {"mode": mode, "length_us": length}
        said = [False]

        def started():
            if not said[0]:
                said[0] = True
                _say({"started": True})
        if mode == "queued":
            batch = max(1, round(batch_us / length))
            depth = max(2, -(-int(ahead_us) // int(batch * length)))
            g = graphs.get((length, batch)) if use_graph else None
            if use_graph and g is None:
                try:
                    s.begin_capture()
                    for _ in range(batch):
                        launch(ns)
                    g = graphs[(length, batch)] = s.end_capture()
                except Exception as e:  # capture not available: plain launches
                    print(f"physics ours: graph capture failed ({e!r}); plain launches",
                          file=sys.stderr, flush=True)
                    use_graph = False
                    s = cp.cuda.Stream(non_blocking=True)
                    s.use()
                    g = None
            meta.update(batch=batch, depth=depth, graph=g is not None)
            events = [cp.cuda.Event(disable_timing=True) for _ in range(depth + 1)]
            pending, n = [], 0
            while cmds.empty():
                if g is not None:
                    g.launch(stream=s)
                else:
                    for _ in range(batch):
                        launch(ns)
                ev = events[n % (depth + 1)]
                ev.record(s)
                pending.append(ev)
                n += 1
                if len(pending) > depth:
                    pending.pop(0).synchronize()
                    started()
            meta["batches"] = n
        else:
            period = int(2 * length * 1e3) if mode == "gaps" else 0
            n = 0
            while cmds.empty():
                t = time.perf_counter_ns()
                launch(ns)
                s.synchronize()
                n += 1
                started()
                while time.perf_counter_ns() < t + period:
                    pass
            meta["launches"] = n
        started()
        cmd = cmds.get()
        s.synchronize()
        got = int(count.get()[0])
        m = min(got, RING)
        ring[:2 * m].get().tofile(cmd[1] if cmd and len(cmd) > 1 else os.devnull)
        meta.update(n=m, wrapped=got > RING)
        _say(meta)
        if not cmd or cmd[0] == "quit":
            return


def job_main(argv):
    """The job's process: `calib M` (tight launch-synchronize rounds), `run N SEED LO HI`
    (N requests, a random LO-HI ms apart); each answers a JSON line of host and
    globaltimer stamps (ns). `quit` or EOF ends it."""
    import cupy as cp
    job_ns = cp.uint64(int(float(argv[0]) * 1e3))
    s = cp.cuda.Stream(non_blocking=True)
    s.use()
    k = cp.RawModule(code=KERNELS).get_function("job")
    ring = cp.zeros(2 * 8192, dtype=cp.uint64)
    clock = time.perf_counter_ns

    def once(i):
        slot = cp.uint32(i)
        ta = clock()
        k((1,), (32,), (job_ns, ring, slot), stream=s)
        s.synchronize()
        return ta, clock()

    for i in range(50):
        once(i)
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    _say({"ready": True, "name": name.decode() if isinstance(name, bytes) else name,
          "cc": f"{props['major']}.{props['minor']}", "driver": cp.cuda.runtime.driverGetVersion(),
          "runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__})
    cmds = _commands()
    while True:
        cmd = cmds.get()
        if not cmd or cmd[0] == "quit":
            return
        if cmd[0] == "calib":
            hosts = [once(i) for i in range(min(int(cmd[1]), 8192))]
        elif cmd[0] == "run":
            n, rng = min(int(cmd[1]), 8192), random.Random(int(cmd[2]))
            lo, hi = float(cmd[3]) / 1e3, float(cmd[4]) / 1e3
            hosts = []
            for i in range(n):
                time.sleep(rng.uniform(lo, hi))
                hosts.append(once(i))
        else:
            _say({"error": f"unexpected {cmd}"})
            continue
        g = ring[:2 * len(hosts)].get().tolist()
        _say({"ta": [h[0] for h in hosts], "tb": [h[1] for h in hosts], "js": g[0::2],
              "je": g[1::2]})


class Child:
    """A child Python of this module, spoken to in lines (JSON answers)."""

    def __init__(self, func, args, env):
        self.p = subprocess.Popen(python_child("physics", func, args), env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def answer(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"physics: child {self.p.pid} silent for {timeout:.0f} s") from None
        if line is None:
            raise RuntimeError(f"physics: child {self.p.pid} ended (exit {self.p.wait()})")
        got = json.loads(line)
        if "error" in got:
            raise RuntimeError(f"physics: child {self.p.pid}: {got['error']}")
        return got

    def ask(self, line, timeout=30.0):
        self.tell(line)
        return self.answer(timeout)

    def tell(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def close(self):
        if self.p.poll() is None:
            try:
                self.tell("quit")
                self.p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


# ------------------------------------------------------------------ the run
def _smi(*args):
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
        return (r.stdout + r.stderr).strip(), r.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        return repr(e), None


def host_info(gpu):
    """Host, GPU and driver (read only), the compute policy (`compute-policy -l`, read
    only), and who else is on the GPU."""
    q = ("index,uuid,name,driver_version,compute_mode,persistence_mode,mig.mode.current,"
         "clocks.sm,clocks.max.sm,power.draw")
    info = {"hostname": socket.gethostname(), "gpu_arg": gpu,
            "gpu": _smi("-i", gpu, f"--query-gpu={q}", "--format=csv,noheader")[0],
            "apps": _smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                         "--format=csv,noheader")[0]}
    policy, rc = _smi("compute-policy", "-i", gpu, "-l")
    if rc != 0:
        policy, rc = _smi("compute-policy", "-l")
    info["compute_policy"], info["compute_policy_rc"] = policy, rc
    info["mps_pipe"] = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    return info


def read_pairs(path):
    """Our kernels' (start, end) of one cell from the child's file, sorted by end."""
    a = array("Q")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    pairs = list(zip(a[0::2], a[1::2]))
    if any(pairs[i][1] > pairs[i + 1][1] for i in range(len(pairs) - 1)):
        pairs.sort(key=lambda p: p[1])
    return pairs


def plan(a):
    """The cells in order: [(round, mode, L)], mode "alone" with L 0."""
    items = [(m, length) for m in a.modes for length in a.lengths]
    cells = [(0, "alone", 0)]
    for r in range(a.rounds):
        order = items if r % 2 == 0 else items[::-1]
        cells += [(r, m, length) for m, length in order] + [(r, "alone", 0)]
    return cells


def cell_name(mode, length):
    return "alone" if mode == "alone" else f"{mode} {length:g}"


FIELDS = ["round", "cell", "mode", "length_us", "ctx", "i", "lat_us", "ta", "tb", "ready", "js",
          "je", "kind", "wait_us", "n_done", "rem_us", "beyond_us", "more_us", "n_more",
          "switch_us", "since_us", "ran_us"]


class Run:
    """The cells of one run, the children and what they gave: rows (CSV, appended as
    cells end) and the summary (JSON, rewritten as cells end)."""

    def __init__(self, a, out):
        self.a, self.out = a, out
        self.lo, self.hi = (float(x) for x in a.every_ms.split(","))
        self.env = (gpu_env(int(a.gpu)) if a.gpu.isdigit()
                    else dict(os.environ, CUDA_VISIBLE_DEVICES=a.gpu))
        self.env["PYTHONUNBUFFERED"] = "1"
        self.rows_path = os.path.join(out, "physics-rows.csv")
        self.sum_path = os.path.join(out, "physics-summary.json")
        self.tmp = tempfile.mkdtemp(prefix="physics-")
        self.summary = {"args": dict(vars(a)), "host": host_info(a.gpu), "started": time.time(),
                        "cells": [], "pooled": {}}
        self.rows, self.ours_runs = {}, {}  # by cell name
        self.job = self.ours = None

    def calibrate(self):
        got = self.job.ask(f"calib {self.a.calib}")
        return calibration(list(zip(got["ta"], got["tb"], got["js"])))

    def cell(self, rnd, mode, length):
        a = self.a
        if mode != "alone" and self.ours is None:
            self.ours = Child("ours_main", [str(a.ahead_us), str(a.batch_us),
                                            "plain" if a.no_graph else "graph"], self.env)
            self.ours.answer(120)
        name = cell_name(mode, length)
        ctx = "none" if self.ours is None else ("idle" if mode == "alone" else "busy")
        c0 = self.calibrate()
        if mode != "alone":
            self.ours.ask(f"start {mode} {length}")
        seed = zlib.crc32(f"{rnd} {name}".encode())
        got = self.job.ask(f"run {a.requests} {seed} {self.lo} {self.hi}",
                           timeout=a.requests * self.hi / 1e3 + 60)
        meta, pairs = {}, []
        if mode != "alone":
            path = os.path.join(self.tmp, "ours.bin")
            meta = self.ours.ask(f"stop {path}", timeout=60)
            pairs = read_pairs(path)
            os.unlink(path)
        c1 = self.calibrate()
        rows = analyze(got, c0, c1, pairs)
        st = dict(ours_stats(pairs, length), **meta) if mode != "alone" else None
        s = summarize(rows, summarize(self.rows.get("alone", [])) if st else None)
        cal = {"before": c0, "after": c1, "drift_ppm": drift_ppm(c0, c1),
               "width_us": (c0["hi"] - c0["lo"]) / 1e3}
        self.summary["cells"].append({"round": rnd, "cell": name, "ctx": ctx, "summary": s,
                                      "ours": st, "calibration": cal})
        self.rows.setdefault(name, []).extend(rows)
        if st:
            self.ours_runs.setdefault(name, []).append(st)
        with open(self.rows_path, "a", newline="") as f:
            w = csv.writer(f)
            for r in rows:
                w.writerow([rnd, name, mode, length, ctx] + [
                    round(r[k], 3) if isinstance(r[k], float) else r[k] for k in FIELDS[5:]])
        note = f"  [r{rnd} ctx {ctx}, drift {fmt(cal['drift_ppm'])} ppm, calib {cal['width_us']:.1f} us"
        if st:
            note += (f", {st['n']} kernels{', graph' if st.get('graph') else ''}"
                     f"{', WRAPPED' if st.get('wrapped') else ''}, stretched {st.get('stretched')}")
        print(table_line(name, s, st) + note + "]", flush=True)
        self.pool()
        self.save()

    def pool(self):
        alone = summarize(self.rows.get("alone", []))
        self.summary["pooled"] = {"alone": alone}
        for name, rows in self.rows.items():
            if name != "alone":
                self.summary["pooled"][name] = summarize(rows, alone)

    def save(self):
        with open(self.sum_path, "w") as f:
            json.dump(self.summary, f, indent=1, default=str)

    def close(self):
        for child in (self.ours, self.job):
            if child:
                child.close()
        self.save()

    def report(self):
        print(f"\npooled over rounds (us; d = latency minus alone's)")
        print(HEAD)
        for name, s in self.summary["pooled"].items():
            duty = mean(x["duty"] for x in self.ours_runs.get(name, []) if x.get("duty"))
            print(table_line(name, s, {"duty": duty}))
        print()
        for line in answers(self.summary["pooled"], self.summary["host"]["compute_policy"]):
            print(line)
        print(f"\nrows: {self.rows_path}\nsummary: {self.sum_path}", flush=True)


def main(argv):
    ap = parser("physics", __doc__)
    ap.add_argument("--gpu", default="0", help="NVML index or UUID (default 0)")
    ap.add_argument("--modes", default="queued,gaps,serial")
    ap.add_argument("--lengths", default="10,25,50,100,500", help="our kernels, us")
    ap.add_argument("--requests", type=int, default=300, help="job requests per cell and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--every-ms", default="5,20", help="the job's random spacing, LO,HI ms")
    ap.add_argument("--job-us", type=float, default=0.0, help="the job kernel's spin, us")
    ap.add_argument("--ahead-us", type=float, default=4000, help="queued: work kept queued")
    ap.add_argument("--batch-us", type=float, default=1000, help="queued: one batch's work")
    ap.add_argument("--calib", type=int, default=200, help="calibration rounds per side")
    ap.add_argument("--no-graph", action="store_true", help="queued: plain launches")
    ap.add_argument("--out", default=None, help="default $OUT, else /tmp/gpulab-physics")
    a = ap.parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    if any(m not in MODES for m in a.modes):
        ap.error(f"--modes: choose from {', '.join(MODES)}")
    a.lengths = [float(x) for x in a.lengths.split(",") if x]
    if not 0 < a.requests <= 8192 or not 0 < a.calib <= 8192:
        ap.error("--requests and --calib: 1 to 8192")
    out = a.out or out_dir("/tmp/gpulab-physics")
    os.makedirs(out, exist_ok=True)
    cells = plan(a)
    lo, hi = (float(x) for x in a.every_ms.split(","))
    print(f"physics: {len(cells)} cells x {a.requests} requests: about "
          f"{len(cells) * a.requests * ((lo + hi) / 2 + 0.1) / 1e3:.0f} s of requests", flush=True)
    run = Run(a, out)
    host = run.summary["host"]
    print(f"host {host['hostname']}: {host['gpu']}\ncompute policy: {host['compute_policy']}",
          flush=True)
    t0 = time.monotonic()
    failed = None
    try:
        run.job = Child("job_main", [str(a.job_us)], run.env)
        run.summary["job_device"] = run.job.answer(120)
        with open(run.rows_path, "w", newline="") as f:
            csv.writer(f).writerow(FIELDS)
        print(HEAD, flush=True)
        for rnd, mode, length in cells:
            run.cell(rnd, mode, length)
    except Exception as e:  # report what the cells before it gave
        failed = repr(e)
        run.summary["error"] = failed
        print(f"physics: stopped: {failed}", file=sys.stderr, flush=True)
    finally:
        run.summary["seconds"] = time.monotonic() - t0
        run.close()
    run.report()
    return 1 if failed else 0
