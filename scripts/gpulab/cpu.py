"""gpufill's CPU: `cpu-sweep`, `tick-cost`, `cpu-states`.

`cpu-sweep`: gpufill's CPU per thread against its loop tick and launch period, and under
churn.

For each (tick_ms, period_ms) runs `gpufill run --gpus 0 --target 50` for 3 s of warm-up
plus `--hold` s, and reports CPU % of a core per thread over the hold (run time from
/proc/PID/task/*/schedstat, in ns), and the mean absolute error of NVML's utilization
(polled every 100 ms) against 50. Then the default settings once more while short CUDA
processes start at 3 a second (`churn`'s children) with `--grace 0.2`, as in `churn`,
to see which thread pays for churn.

To compare builds side by side, name them with `--exe LABEL=PATH` and prefix configs
with the label (`old:10/20`); `--repeats N` runs the whole list N times, interleaved,
and the summary gives the median of each row.

    python3 scripts/lab.py cpu-sweep carry/gpufill [--hold 8] [--configs 10/20,25/50/5000]
        [--no-churn]
    python3 scripts/lab.py cpu-sweep --exe old=carry/old/gpufill --exe new=carry/gpufill \
        --configs old:10/20,new:20/20 --repeats 3 --no-churn

Prints a table; writes $OUT/cpu_sweep.json.

`tick-cost`: what one tick of gpufill's loop thread costs, split by subtraction (one GPU):
- `run --target 50`: wake-up, loop, NVML process check, and a burst launched each tick;
- `run --target 0`: the same without launching (the loop holds duty 0);
- `simulate --realtime`: wake-up and loop only, on the simulated GPU (no NVML, no CUDA).
Each for 10 s after 3 s of warm-up at `tick_ms` = `period_ms` = TICK, repeated and
interleaved; CPU from the loop thread's schedstat. Prints microseconds of CPU per tick
(medians) and writes $OUT/tick_cost.json:

    python3 scripts/lab.py tick-cost carry/gpufill [--tick 20] [--repeats 3]

`cpu-states`: gpufill's CPU on one GPU by state, for one or more builds interleaved on one host
(issue 21's CPU goal, issue 39 item 7: at most 1 % of a core per GPU in every state).

States, exactly four: `idle` (nobody else on the GPU: gpufill fills), `holder` (beside a
process that holds a context and runs nothing: gpufill fills beside it once its probe
finds it dormant), `live` (beside a service answering 20 small requests a second:
gpufill's probe finds it live and it holds off) and `busy` (a job running kernels all
along: gpufill yields). Each other process starts once per state and serves every
repeat of every build. For each state, each repeat and each build (the order of builds
turns each repeat, so the builds' windows interleave): start `gpufill run` at the
defaults (`yield.idle_grace_s` = GRACE), wait until it is in the state (beside the
holder: until `gpufill_filling_beside` is 1; beside the service GRACE + 4 s, the idle
grace, its confirming probe and the first hold; beside the busy job 3 s), then read
every thread's schedstat and context switches over HOLD seconds. Meanwhile an inotify
watch counts the opens of /dev/nvidiactl and /dev/nvidia-uvm by anyone (each cuts
gpufill's wait short and, while it fills, starts a window of process-list reads:
`gpufill_core::hint`). Each window prints the state, duty and pauses gpufill's
metrics showed at its end; the summary gives each state's and build's median CPU
[range] and the loop thread's median wake-ups a second.

Unless --no-trace, then per state `idle` and `holder` one debug trace of the first
build (RUST_LOG=debug, 6 s) whose lines are counted by message (about 25 s more).

    python3 scripts/lab.py cpu-states --exe new=carry/gpufill --exe old=carry/old/gpufill \\
        [--repeats 3] [--hold 8] [--grace 4] [--no-trace] [--out DIR]

It prints its own estimate of how long it takes before it starts (about
builds x repeats x (17.5 + 2 GRACE + 4 HOLD) s, plus about 5 s for each other process to start):
with two builds, `--repeats 2 --hold 5 --grace 2 --no-trace` is about 180 s.
"""
import collections
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from .lib import (N, Gpufill, alternate, named_exe, cpu_between, cpu_sample, handle, mae, out_dir, parser,
                  scrape, state_of, threads)
from .robust import children

CONFIGS = [(10, 20), (20, 20), (25, 25), (25, 50), (50, 50)]


def measure(exe, h, tick, period, hold, during=None, extra=(), label="", kernel_us=None,
            target=50):
    config = f"tick_ms = {tick}\n[load]\nperiod_ms = {period}\n"
    if kernel_us:
        config += f"max_kernel_us = {kernel_us}\n"
    g = Gpufill(exe, ["--gpus", "0", "--target", str(target), *extra], config=config)
    g.wait_for("filling", 30)
    time.sleep(3)
    a, ta = g.threads_cpu(), time.time()
    util = []
    worker = threading.Thread(target=during, daemon=True) if during else None
    if worker:
        worker.start()
    while time.time() - ta < hold:
        util.append(N.nvmlDeviceGetUtilizationRates(h).gpu)
        time.sleep(0.1)
    b, tb = g.threads_cpu(), time.time()
    if worker:
        worker.join(timeout=60)
    g.stop()
    wall = tb - ta
    grouped = {k: 100 * (b[k] - a.get(k, 0.0)) / wall for k in b}
    return {
        "exe": label or exe, "tick_ms": tick, "period_ms": period, "max_kernel_us": kernel_us,
        "churn": bool(during),
        "cpu_total_pct": sum(grouped.values()),
        "cpu_by_thread_pct": dict(sorted(grouped.items(), key=lambda kv: -kv[1])),
        "mae_nvml_util": mae(util, target) if not during else None,
        "yield_lines": g.count("yielding"),
    }


def parse_config(text, exes, default_exe):
    """`[label:]tick/period[/max_kernel_us]` -> (label, path, tick, period, kernel_us)."""
    label, _, spec = text.rpartition(":")
    numbers = [int(x) for x in spec.split("/")]
    tick, period, kernel_us = (numbers + [None])[:3]
    if label and label not in exes:
        sys.exit(f"unknown build label {label!r}: give it with --exe {label}=PATH")
    return label, exes.get(label, default_exe), tick, period, kernel_us


def sweep(argv):
    ap = parser("cpu-sweep", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--exe", action="append", default=[], metavar="LABEL=PATH",
                    help="a build to compare, used by configs prefixed with LABEL:")
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--configs", default=",".join(f"{t}/{p}" for t, p in CONFIGS),
                    help="[label:]tick_ms/period_ms[/max_kernel_us], comma-separated")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-churn", action="store_true")
    args = ap.parse_args(argv)
    exes = dict(named_exe(e) for e in args.exe)
    configs = [parse_config(c, exes, args.gpufill) for c in args.configs.split(",")]
    h = handle(0)
    rows = []
    for _ in range(args.repeats):
        for label, exe, t, p, k in configs:
            rows.append(measure(exe, h, t, p, args.hold, label=label, kernel_us=k))
    env = dict(os.environ)

    def churning():
        children(args.hold, 3, env, 1, 3)

    if not args.no_churn:
        label, exe, t, p, k = configs[0]
        rows.append(measure(exe, h, t, p, args.hold, during=churning,
                            extra=["--grace", "0.2"], label=label, kernel_us=k))
    print(f"{'build':>8}{'tick':>5}{'period':>7}{'kernel':>7}{'churn':>6}{'cpu%':>7}{'mae':>6}"
          "  threads (% of a core)")
    for r in rows:
        m = "-" if r["mae_nvml_util"] is None else f"{r['mae_nvml_util']:.2f}"
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(r["cpu_by_thread_pct"].items())[:5])
        kernel = r["max_kernel_us"] or "-"
        print(f"{os.path.basename(r['exe']):>8}{r['tick_ms']:>5}{r['period_ms']:>7}{kernel:>7}"
              f"{'yes' if r['churn'] else 'no':>6}{r['cpu_total_pct']:>7.2f}{m:>6}  {top}")
    if args.repeats > 1:
        print("medians over the repeats:")
        for label, exe, t, p, k in configs:
            mine = [r for r in rows if r["exe"] == (label or exe) and r["tick_ms"] == t
                    and r["period_ms"] == p and r["max_kernel_us"] == k and not r["churn"]]
            cpu = [r["cpu_total_pct"] for r in mine]
            err = [r["mae_nvml_util"] for r in mine]
            print(f"{label or exe:>8}{t:>5}{p:>7}{k or '-':>7}  cpu% {statistics.median(cpu):.2f} "
                  f"(of {', '.join(f'{c:.2f}' for c in cpu)}), mae {statistics.median(err):.2f}")
    with open(os.path.join(out_dir("cpu-sweep-out"), "cpu_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)


# ------------------------------------------------------------------ tick-cost
def simulated(exe, tick, hold):
    """Loop-thread CPU % of `simulate --realtime` over `hold` s after 3 s."""
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(f"tick_ms = {tick}\n[load]\nperiod_ms = {tick}\n")
    cfg.close()
    p = subprocess.Popen([exe, "-q", "simulate", "--realtime", "--duration", str(hold + 5),
                          "--config", cfg.name], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(3)
    a, ta = threads(p.pid), time.time()
    time.sleep(hold)
    b, tb = threads(p.pid), time.time()
    p.kill()
    p.wait()
    os.unlink(cfg.name)
    # The simulation steps its loop on the main thread.
    return max(100 * (b[k] - a.get(k, 0.0)) / (tb - ta) for k in b)


def tick_cost(argv):
    ap = parser("tick-cost", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--tick", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hold", type=float, default=10.0)
    args = ap.parse_args(argv)
    h = handle(0)
    per_tick_us = 10 * args.tick  # % of a core -> us per tick
    rows = {"filling, target 50": [], "target 0 (no launches)": [], "simulated GPU": []}
    for _ in range(args.repeats):
        for target, name in ((50, "filling, target 50"), (0, "target 0 (no launches)")):
            r = measure(args.gpufill, h, args.tick, args.tick, args.hold, target=target)
            loop = max(v for k, v in r["cpu_by_thread_pct"].items() if k.startswith("gpufill-gpu"))
            rows[name].append(loop * per_tick_us)
        rows["simulated GPU"].append(simulated(args.gpufill, args.tick, args.hold) * per_tick_us)
    print(f"loop thread CPU per {args.tick} ms tick, us (median of {args.repeats}):")
    for name, values in rows.items():
        print(f"  {name:24} {statistics.median(values):7.1f}   ({', '.join(f'{v:.1f}' for v in values)})")
    fill, idle, sim = (statistics.median(v) for v in rows.values())
    print(f"  => launching {fill - idle:.1f} us a tick, NVML and the real devices "
          f"{idle - sim:.1f} us, wake-up and loop {sim:.1f} us")
    with open(os.path.join(out_dir("tick-cost-out"), "tick_cost.json"), "w") as f:
        json.dump({"tick_ms": args.tick, "us_per_tick": rows}, f, indent=1)



# ------------------------------------------------------------------ cpu-states
PORT = 9481
DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia-uvm")
HOLDER = ("import sys, time, torch\n"
          "x = torch.zeros(1, device='cuda'); torch.cuda.synchronize()\n"
          "print('ready', flush=True)\n"
          "time.sleep(3600)\n")
# The other process of each state but `idle`: a dormant holder, a live service (a small
# request 20 times a second: gpufill finds it live and holds off), a busy job (gpufill
# yields).
OTHERS = {
    "holder": HOLDER,
    "live": ("import time, torch\n"
             "x = torch.randn(256, 256, device='cuda'); torch.cuda.synchronize()\n"
             "print('ready', flush=True)\n"
             "while True:\n"
             "    time.sleep(0.05); (x @ x).sum().item()\n"),
    "busy": ("import torch\n"
             "x = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
             "torch.cuda.synchronize(); print('ready', flush=True)\n"
             "while True:\n"
             "    for _ in range(20): x @ x\n"
             "    torch.cuda.synchronize()\n"),
}


class OpenCounter:
    """Counts IN_OPEN events on the device files (anyone's) from a thread of its own."""

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(0)
        for path in DEVICE_FILES:
            if os.path.exists(path):
                libc.inotify_add_watch(self.fd, path.encode(), 0x20)  # IN_OPEN
        self.count = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            buf = os.read(self.fd, 4096)
            i = 0
            while i + 16 <= len(buf):
                self.count += 1
                i += 16 + int.from_bytes(buf[i + 12:i + 16], "little")


def start_gpufill(exe, grace, log, rust_log="gpufill=info"):
    return Gpufill(exe, ["--gpus", "0"], config=f"[yield]\nidle_grace_s = {grace}\n", port=PORT,
                   log_path=log, rust_log=rust_log)


# The four states, and how long gpufill takes at most (s) to reach each, from its start,
# given the idle grace: it fills at once on an empty GPU; beside the holder it yields
# for the idle grace, probes and fills beside it; beside the service it yields for the
# idle grace, its first probe pauses to confirm (CONFIRM_AFTER, at most the idle grace)
# and the second holds off; beside the busy job it yields at once.
STATES = ("idle", "holder", "live", "busy")
STATE_WAIT = {"idle": lambda g: 1.0, "holder": lambda g: g + 1.5, "live": lambda g: g + 4.0,
              "busy": lambda g: 3.0}


def states_seconds(states, builds, repeats, hold, grace, trace):
    """About how long `cpu-states` takes: per window the wait for its state, a second
    before it, the window and a second to start and stop gpufill; about 5 s for each
    other process to start; with `trace`, the traces of `idle` and `holder`."""
    runs = builds * repeats
    total = sum(runs * (STATE_WAIT[st](grace) + 1.0 + hold + 1.0) + (5.0 if st in OTHERS else 0.0)
                for st in states)
    if trace:
        total += sum(STATE_WAIT[st](grace) + 8.0 for st in states if st in ("idle", "holder"))
    return total


def wait_filling(state, limit, grace=4.0):
    """Until gpufill fills (beside the holder: fills beside it); False at `limit` s.
    Beside a live service or a busy job: until it has had time to judge it."""
    if state in ("live", "busy"):
        time.sleep(STATE_WAIT[state](grace))
        return True
    end = time.monotonic() + limit
    while time.monotonic() < end:
        m = scrape(PORT)
        if m.get("gpufill_duty_ratio", 0) > 0 and (state == "idle" or m.get("gpufill_filling_beside") == 1):
            return True
        time.sleep(0.2)
    return False


def window(pid, hold, opens):
    a, o0, t0 = cpu_sample(pid), opens.count, time.monotonic()
    time.sleep(hold)
    b, o1, secs = cpu_sample(pid), opens.count, time.monotonic() - t0
    share, wakes, sleeps = cpu_between(a, b, secs)
    return {"cpu": sum(share.values()), "threads": {k: [v, wakes[k], sleeps.get(k, 0.0)]
                                                    for k, v in share.items()},
            "opens_per_s": (o1 - o0) / secs}


def trace(exe, state, grace, out):
    log = os.path.join(out, f"trace-{state}.log")
    g = start_gpufill(exe, grace, log, "gpufill=debug,gpufill_core=debug,gpufill_cuda=debug,"
                                       "gpufill_nvml=debug,gpufill_runtime=debug")
    ok = wait_filling(state, grace + 15)
    t0 = time.time()
    time.sleep(6)
    g.stop()
    counts = collections.Counter()
    for _, line in g.lines:
        # The message: the text after the level and target, before the fields.
        m = re.search(r"(DEBUG|INFO|WARN|TRACE)\s+\S+:\s+(.*)", line)
        if m:
            counts[re.sub(r"\s\w+=.*", "", m.group(2))[:70]] += 1
    print(f"  debug trace, {state} (filling={ok}), lines over about {time.time() - t0 + 0:.0f} s "
          f"after it filled, most frequent first:")
    for msg, n in counts.most_common(12):
        print(f"    {n:6d}  {msg}")


def states(argv):
    ap = parser("cpu-states", __doc__)
    ap.add_argument("--exe", action="append", required=True, help="NAME=PATH, or PATH (named by its file name)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--grace", type=float, default=4.0)
    ap.add_argument("--states", default="idle,holder,live,busy")
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/cpu-states"))
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    exes = [named_exe(e) for e in a.exe]
    chosen = a.states.split(",")
    unknown = [st for st in chosen if st not in STATES]
    if unknown:
        ap.error(f"unknown state(s) {unknown}: the states are {', '.join(STATES)}")
    estimate = states_seconds(chosen, len(exes), a.repeats, a.hold, a.grace, not a.no_trace)
    print(f"cpu-states: {', '.join(chosen)}; builds {', '.join(n for n, _ in exes)}; {a.repeats} "
          f"repeat(s) of {a.hold:g} s windows, interleaved; about {estimate:.0f} s", flush=True)
    started = time.monotonic()
    opens = OpenCounter()
    rows = []
    for state in chosen:
        holder = None
        if state in OTHERS:
            holder = subprocess.Popen([sys.executable, "-c", OTHERS[state]], stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
        for r in range(a.repeats):
            for name, exe in alternate(exes, r):
                rows.append(state_run(a, state, name, exe, r, opens))
        if not a.no_trace and state in ("idle", "holder"):
            trace(exes[0][1], state, a.grace, a.out)
        if holder:
            holder.kill()
            holder.wait()
    print("median CPU, % of one core [range]; the loop thread's wake-ups a second (median):")
    for state in chosen:
        for name, _ in exes:
            w = [x["window"] for x in rows if x["state"] == state and x["exe"] == name and x["window"]]
            if w:
                v = [x["cpu"] for x in w]
                wakes = [sum(t[1] for k, t in x["threads"].items() if k.startswith("gpufill-gpu")) for x in w]
                print(f"  {state:6} {name:8} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
                      f"  loop {statistics.median(wakes):.0f}/s  ({len(v)} windows)")
    print(f"cpu-states: {time.monotonic() - started:.0f} s", flush=True)
    with open(os.path.join(a.out, "cpu_states.json"), "w") as f:
        json.dump(rows, f, indent=1)


def state_run(a, state, name, exe, r, opens):
    g = start_gpufill(exe, a.grace, os.path.join(a.out, f"gpufill-{name}-{state}.log"))
    ok = wait_filling(state, a.grace + 15, a.grace)
    time.sleep(1.0)
    w = window(g.pid, a.hold, opens) if ok else None
    m = scrape(PORT)
    g.stop()
    if w:
        parts = ", ".join(f"{k} {v[0]:.2f} ({v[1]:.0f}/s, {v[2]:.0f} vol/s)"
                          for k, v in sorted(w["threads"].items(), key=lambda x: -x[1][0])
                          if v[0] > 0.005)
        print(f"  {state:6} {name:8} #{r}: {w['cpu']:5.2f} % [{parts}] device-file opens "
              f"{w['opens_per_s']:.1f}/s state {state_of(m)} duty {m.get('gpufill_duty_ratio', float('nan')):.2f} "
              f"pauses {m.get('gpufill_pauses_total', float('nan')):.0f}", flush=True)
    else:
        print(f"  {state:6} {name:8} #{r}: did not fill within {a.grace + 15:.0f} s", flush=True)
    return {"state": state, "exe": name, "repeat": r, "filled": ok, "window": w,
            "duty": m.get("gpufill_duty_ratio"), "beside": m.get("gpufill_filling_beside"),
            "pauses": m.get("gpufill_pauses_total")}
