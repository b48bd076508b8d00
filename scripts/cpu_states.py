#!/usr/bin/env python3
"""gpufill's CPU on one GPU by state, for one or more builds interleaved on one host
(issue 21's CPU goal: at most 1 % of a core per GPU in every state).

States: `idle` (nobody else on the GPU), `holder` (beside a process that holds a
context and runs nothing: gpufill fills beside it once its probe finds it dormant),
`live` (beside a service answering 20 small requests a second: gpufill's probe finds it
live and it holds off) and `busy` (a job running kernels all along: gpufill yields).
For each repeat, each state and each build (the order of builds turns each repeat):
start `gpufill run` at the defaults (`yield.idle_grace_s` = GRACE), wait until it fills
(beside the holder: until `gpufill_filling_beside` is 1), then read every thread's
schedstat and context switches over HOLD seconds. Meanwhile an inotify watch counts
the opens of /dev/nvidiactl and /dev/nvidia-uvm by anyone (each cuts gpufill's wait
short and starts a window of process-list reads: `gpufill_core::hint`).

Then, per state, one debug trace of the first build (RUST_LOG=debug, 6 s) whose lines
are counted by message, to tell what a second of the loop does.

    python3 scripts/cpu_states.py --exe new=carry/gpufill --exe old=carry/old/gpufill \\
        [--repeats 3] [--hold 8] [--grace 4] [--out DIR]
"""
import argparse
import collections
import ctypes
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_lib import schedstat, switches  # noqa: E402

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


def scrape():
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=1).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r'(\w+)(\{[^}]*\})?\s+(\S+)', line)
        if not m:
            continue
        name, labels, value = m.groups()
        state = re.search(r'state="(\w+)"', labels or "")
        key = f"{name}.{state.group(1)}" if state else name
        out[key] = float(value)
    return out


def start_gpufill(exe, grace, log, rust_log="gpufill=info"):
    conf = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    conf.write(f"[yield]\nidle_grace_s = {grace}\n")
    conf.close()
    env = dict(os.environ, NO_COLOR="1", RUST_LOG=rust_log)
    logf = open(log, "a")
    return subprocess.Popen([exe, "run", "--gpus", "0", "--config", conf.name,
                             "--metrics", f"127.0.0.1:{PORT}"], stdout=logf, stderr=logf, env=env)


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def wait_filling(state, limit, grace=4.0):
    """Until gpufill fills (beside the holder: fills beside it); False at `limit` s.
    Beside a live service or a busy job: until it has had time to judge it."""
    if state in ("live", "busy"):
        time.sleep(grace + 4 if state == "live" else 3)
        return True
    end = time.monotonic() + limit
    while time.monotonic() < end:
        m = scrape()
        if m.get("gpufill_duty_ratio", 0) > 0 and (state == "idle" or m.get("gpufill_filling_beside") == 1):
            return True
        time.sleep(0.2)
    return False


def window(pid, hold, opens):
    a_s, a_w, o0, t0 = schedstat(pid), switches(pid), opens.count, time.monotonic()
    time.sleep(hold)
    b_s, b_w, o1, secs = schedstat(pid), switches(pid), opens.count, time.monotonic() - t0
    threads = {}
    for k, (run, n) in b_s.items():
        r0, n0 = a_s.get(k, (0, 0))
        vol = b_w.get(k, (0, 0))[0] - a_w.get(k, (0, 0))[0]
        name = k.split(":")[0]
        t = threads.setdefault(name, [0.0, 0.0, 0.0])
        t[0] += (run - r0) / secs / 1e7
        t[1] += (n - n0) / secs
        t[2] += vol / secs
    return {"cpu": sum(t[0] for t in threads.values()), "threads": threads,
            "opens_per_s": (o1 - o0) / secs}


def trace(exe, state, grace, out):
    log = os.path.join(out, f"trace-{state}.log")
    p = start_gpufill(exe, grace, log, "gpufill=debug,gpufill_core=debug,gpufill_cuda=debug,"
                                       "gpufill_nvml=debug,gpufill_runtime=debug")
    ok = wait_filling(state, grace + 15)
    t0 = time.time()
    time.sleep(6)
    stop(p)
    counts = collections.Counter()
    for line in open(log, errors="replace"):
        # The message: the text after the level and target, before the fields.
        m = re.search(r"(DEBUG|INFO|WARN|TRACE)\s+\S+:\s+(.*)", line)
        if m:
            counts[re.sub(r"\s\w+=.*", "", m.group(2))[:70]] += 1
    print(f"  debug trace, {state} (filling={ok}), lines over about {time.time() - t0 + 0:.0f} s "
          f"after it filled, most frequent first:")
    for msg, n in counts.most_common(12):
        print(f"    {n:6d}  {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--grace", type=float, default=4.0)
    ap.add_argument("--states", default="idle,holder,live,busy")
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/cpu-states"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    exes = [tuple(e.split("=", 1)) for e in a.exe]
    opens = OpenCounter()
    rows = []
    for state in a.states.split(","):
        holder = None
        if state in OTHERS:
            holder = subprocess.Popen([sys.executable, "-c", OTHERS[state]], stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
        for r in range(a.repeats):
            order = exes if r % 2 == 0 else exes[::-1]
            for name, exe in order:
                p = start_gpufill(exe, a.grace, os.path.join(a.out, f"gpufill-{name}-{state}.log"))
                ok = wait_filling(state, a.grace + 15, a.grace)
                time.sleep(1.0)
                w = window(p.pid, a.hold, opens) if ok else None
                m = scrape()
                stop(p)
                rows.append({"state": state, "exe": name, "repeat": r, "filled": ok, "window": w,
                             "duty": m.get("gpufill_duty_ratio"), "beside": m.get("gpufill_filling_beside"),
                             "pauses": m.get("gpufill_pauses_total")})
                if w:
                    parts = ", ".join(f"{k} {v[0]:.2f} ({v[1]:.0f}/s, {v[2]:.0f} vol/s)"
                                      for k, v in sorted(w["threads"].items(), key=lambda x: -x[1][0])
                                      if v[0] > 0.005)
                    st = [k.split(".", 1)[1] for k, v in m.items() if k.startswith("gpufill_state.") and v == 1]
                    print(f"  {state:6} {name:8} #{r}: {w['cpu']:5.2f} % [{parts}] device-file opens "
                          f"{w['opens_per_s']:.1f}/s state {st} duty {m.get('gpufill_duty_ratio', float('nan')):.2f} "
                          f"pauses {m.get('gpufill_pauses_total', float('nan')):.0f}", flush=True)
                else:
                    print(f"  {state:6} {name:8} #{r}: did not fill within {a.grace + 15:.0f} s", flush=True)
        if not a.no_trace and state in ("idle", "holder"):
            trace(exes[0][1], state, a.grace, a.out)
        if holder:
            holder.kill()
            holder.wait()
    print("median CPU, % of one core (range):")
    for state in a.states.split(","):
        for name, _ in exes:
            v = [x["window"]["cpu"] for x in rows if x["state"] == state and x["exe"] == name and x["window"]]
            if v:
                print(f"  {state:6} {name:8} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
    with open(os.path.join(a.out, "cpu_states.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
