#!/usr/bin/env python3
"""What one tick of gpufill's loop thread costs, split by subtraction (one GPU):

- `run --target 50`: wake-up, loop, NVML process check, and a burst launched each tick;
- `run --target 0`: the same without launching (the loop holds duty 0);
- `simulate --realtime`: wake-up and loop only, on the simulated GPU (no NVML, no CUDA).

Each for 10 s after 3 s of warm-up at `tick_ms` = `period_ms` = TICK, repeated and
interleaved; CPU from the loop thread's schedstat. Prints microseconds of CPU per tick
(medians) and writes $OUT/tick_cost.json. Usage:

    python3 scripts/tick_cost.py carry/gpufill [--tick 20] [--repeats 3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import pynvml as N

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_sweep import measure, median  # noqa: E402
from gpu_diag import threads  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    ap.add_argument("--tick", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hold", type=float, default=10.0)
    args = ap.parse_args()
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
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
        print(f"  {name:24} {median(values):7.1f}   ({', '.join(f'{v:.1f}' for v in values)})")
    fill, idle, sim = (median(v) for v in rows.values())
    print(f"  => launching {fill - idle:.1f} us a tick, NVML and the real devices "
          f"{idle - sim:.1f} us, wake-up and loop {sim:.1f} us")
    out = os.environ.get("OUT", "tick-cost-out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tick_cost.json"), "w") as f:
        json.dump({"tick_ms": args.tick, "us_per_tick": rows}, f, indent=1)


if __name__ == "__main__":
    main()
