#!/usr/bin/env python3
"""SIGKILL: how soon the GPU is free when gpufill dies without cleaning up.

Per round: starts `gpufill run --gpus 0 --target 50`, waits until it has filled for
3 s, `kill -9`s it, then polls every ~1 ms: when the process is gone (reaped), when
NVML no longer lists its PID, and NVML's utilization samples after the kill (the
first one whose 200 ms window lies wholly after the kill should read 0: no kernel of
ours outlives the process, since they are at most 2 ms long). Writes sigkill.json to
$OUT. About 10 s a round. Usage:

    python3 scripts/sigkill_check.py carry/gpufill [--rounds 3]
"""
import argparse
import json
import os
import signal
import time

import pynvml as N

from robust_lib import Gpufill, fmt, pids_on, samples_since


def one_round(exe, h, log_path):
    g = Gpufill(exe, ["--gpus", "0", "--target", "50"], log_path=log_path)
    filling = g.wait_for("filling", timeout=30)
    if filling is None:
        g.stop()
        return {"error": "gpufill never filled"}
    time.sleep(3)
    last_ts = max([0] + [int(t * 1e6) for t, _ in samples_since(h, 0)])
    t_kill = time.time()
    os.kill(g.pid, signal.SIGKILL)
    gone = unlisted = None
    while time.time() < t_kill + 5 and (gone is None or unlisted is None):
        now = time.time()
        if gone is None and g.proc.poll() is not None:
            gone = now
        if unlisted is None and g.pid not in pids_on(h):
            unlisted = now
        time.sleep(0.001)
    time.sleep(1.0)
    after = [(round(t - t_kill, 3), v) for t, v in samples_since(h, last_ts)]
    g.save_log()
    # Samples are stamped at the end of their window; a window wholly after the kill
    # ends at least one period (200 ms on an H200) after it.
    clean = [v for t, v in after if t >= 0.2]
    return {
        "reaped_ms": 1000 * (gone - t_kill) if gone else None,
        "unlisted_ms": 1000 * (unlisted - t_kill) if unlisted else None,
        "samples_after_kill": after[:8],
        "first_full_window_after_kill": clean[0] if clean else None,
        "busy_windows_after_kill": sum(1 for v in clean if v > 0),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    rounds = [one_round(args.gpufill, h, os.path.join(out, "gpufill.log")) for _ in range(args.rounds)]
    with open(os.path.join(out, "sigkill.json"), "w") as f:
        json.dump(rounds, f, indent=1)
    print("== SIGKILL: round reaped_ms unlisted_ms first_full_window_util busy_windows_after samples_after_kill")
    for i, r in enumerate(rounds):
        print(i, fmt(r.get("reaped_ms"), 1), fmt(r.get("unlisted_ms"), 1),
              fmt(r.get("first_full_window_after_kill")), fmt(r.get("busy_windows_after_kill")),
              r.get("samples_after_kill", r.get("error")))
    N.nvmlShutdown()


if __name__ == "__main__":
    main()
