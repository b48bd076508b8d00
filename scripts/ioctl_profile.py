#!/usr/bin/env python3
"""Where gpufill's loop thread spends its CPU, by driver call: runs `gpufill run` under
the ioctl_count shim (scripts/ioctl_count.c) on an idle GPU and beside a dormant holder,
and prints, per state, each ioctl request / RM control command's calls a second and
thread CPU a second against the threads' whole CPU (schedstat) over the same window.

    python3 scripts/ioctl_profile.py carry/gpufill [--hold 8] [--out DIR]
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_states import HOLDER, start_gpufill, stop, wait_filling  # noqa: E402
from live_lib import schedstat  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--grace", type=float, default=4.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/ioctl-profile"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shim = "/tmp/ioctl_count.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", shim, os.path.join(HERE, "ioctl_count.c"),
                    "-ldl", "-lpthread"], check=True)
    for state in ("idle", "holder"):
        holder = None
        if state == "holder":
            holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
        counts = os.path.join(a.out, f"ioctls-{state}.txt")
        if os.path.exists(counts):
            os.unlink(counts)
        os.environ.update(LD_PRELOAD=shim, IOCTL_COUNT_OUT=counts)
        p = start_gpufill(a.gpufill, a.grace, os.path.join(a.out, f"gpufill-{state}.log"))
        del os.environ["LD_PRELOAD"]
        ok = wait_filling(state, a.grace + 15)
        time.sleep(1)
        p.send_signal(signal.SIGUSR2)
        s0, t0 = schedstat(p.pid), time.monotonic()
        time.sleep(a.hold)
        p.send_signal(signal.SIGUSR2)
        s1, secs = schedstat(p.pid), time.monotonic() - t0
        time.sleep(0.3)
        stop(p)
        if holder:
            holder.kill()
            holder.wait()
        cpu = collections.Counter()
        for k, (run, _) in s1.items():
            cpu[k.split(":")[0]] += (run - s0.get(k, (0, 0))[0]) / secs / 1e3  # us a second
        rows = []
        with open(counts) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                req, cmd, calls, us, *thread = line.split()
                rows.append((" ".join(thread), req, cmd, int(calls) / secs, float(us) / secs))
        print(f"{state} (filling: {ok}), {secs:.1f} s; threads' CPU, us a second: "
              + ", ".join(f"{k} {v:.0f}" for k, v in cpu.most_common() if v > 1))
        by_thread = collections.Counter()
        for t, _, _, _, us in rows:
            by_thread[t] += us
        print("  in ioctls, us a second: " + ", ".join(f"{k} {v:.0f}" for k, v in by_thread.most_common()))
        for t, req, cmd, n, us in sorted(rows, key=lambda r: -r[4])[:14]:
            print(f"    {t:16} req {req:>9} cmd {cmd:>9}: {n:7.1f}/s {us:8.1f} us/s ({us / max(n, 1e-9):.1f} us a call)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
