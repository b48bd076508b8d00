#!/usr/bin/env python3
"""Board power and GPM SM utilization of gpufill's spin kernels, over width x duty.

Runs on the GPU machine (CuPy, pynvml; no gpufill binary needed). For each kernel of
gpufill-cuda/kernels/spin.ptx (`spin`, `spin_sleep`), each grid shape and each duty it launches
kernels duty-cycled like gpufill's launcher (a 20 ms period, bursts of <= 2 ms kernels,
then sleep), and records over the steady part: mean board power, NVML utilization and
GPM SM utilization (Hopper+). This is the data behind the width/duty power model of
`metric = "sm"`.

    python3 scripts/power_grid.py [--seconds 3] [--out DIR]

Prints one row per point and writes DIR/power_grid.json.
"""

import argparse
import json
import os
import threading
import time

import cupy as cp
import numpy as np
import pynvml as nv

PERIOD = 0.020
MAX_KERNEL = 0.002
SHAPES = [(1, 32), (33, 32), (66, 32), (132, 32), (132, 128), (264, 32), (1056, 256)]
DUTIES = [0.25, 0.5, 1.0]


class Sampler(threading.Thread):
    """Reads board power and NVML utilization every 50 ms while running."""

    def __init__(self, handle):
        super().__init__(daemon=True)
        self.handle = handle
        self.power = []
        self.util = []
        self.go = True

    def run(self):
        while self.go:
            self.power.append(nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0)
            self.util.append(nv.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            time.sleep(0.05)


class Gpm:
    """GPM SM utilization between two samples, or None where unsupported."""

    def __init__(self, handle):
        self.handle = handle
        try:
            self.ok = bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            self.a = nv.nvmlGpmSampleAlloc()
            self.b = nv.nvmlGpmSampleAlloc()
        except Exception as e:  # old pynvml or old GPU
            print("GPM unavailable:", e)
            self.ok = False

    def start(self):
        if self.ok:
            nv.nvmlGpmSampleGet(self.handle, self.a)

    def stop(self):
        if not self.ok:
            return None
        nv.nvmlGpmSampleGet(self.handle, self.b)
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = 2
        get.sample1 = self.a
        get.sample2 = self.b
        get.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
        get.metrics[1].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
        nv.nvmlGpmMetricsGet(get)
        return get.metrics[0].value, get.metrics[1].value


def measure(handle, gpm, seconds, work):
    """Runs `work(deadline)` for `seconds`; measures over all but the first 0.8 s."""
    warm = time.perf_counter() + 0.8
    end = warm + seconds
    work(warm)
    sampler = Sampler(handle)
    sampler.start()
    gpm.start()
    work(end)
    sm = gpm.stop()
    sampler.go = False
    sampler.join()
    return {
        "power_w": float(np.mean(sampler.power)),
        "util": float(np.mean(sampler.util)),
        "sm_util": None if sm is None else sm[0],
        "sm_occupancy": None if sm is None else sm[1],
    }


def cycled(func, blocks, threads, duty):
    """A work function: duty-cycled bursts of `func` until a deadline."""
    on = duty * PERIOD
    n = max(1, int(np.ceil(on / MAX_KERNEL - 1e-9)))
    ns = np.uint64(int(on / n * 1e9))

    def work(deadline):
        nxt = time.perf_counter()
        while time.perf_counter() < deadline:
            for _ in range(n):
                func((blocks,), (threads,), (ns,))
            cp.cuda.runtime.deviceSynchronize()
            nxt += PERIOD
            pause = nxt - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            else:
                nxt = time.perf_counter()

    return work


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "power-grid-out"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    gpm = Gpm(handle)
    here = os.path.dirname(os.path.abspath(__file__))
    module = cp.RawModule(path=os.path.join(here, "..", "kernels", "spin.ptx"))
    rows = []
    idle = measure(handle, gpm, args.seconds, lambda d: time.sleep(max(0, d - time.perf_counter())))
    idle.update(kernel="idle", blocks=0, threads=0, duty=0.0)
    rows.append(idle)
    print(f"{'kernel':<11}{'blocks':>7}{'thr':>5}{'duty':>6}{'util':>7}{'SM%':>7}{'occ%':>7}{'W':>8}")

    def show(r):
        sm = "-" if r["sm_util"] is None else f"{r['sm_util']:.1f}"
        occ = "-" if r["sm_occupancy"] is None else f"{r['sm_occupancy']:.1f}"
        print(f"{r['kernel']:<11}{r['blocks']:>7}{r['threads']:>5}{r['duty']:>6.2f}"
              f"{r['util']:>7.1f}{sm:>7}{occ:>7}{r['power_w']:>8.1f}", flush=True)

    show(idle)
    for name in ["spin", "spin_sleep"]:
        func = module.get_function(name)
        for blocks, threads in SHAPES:
            for duty in DUTIES:
                if (blocks, threads) == (1056, 256) and name == "spin_sleep" and duty < 1.0:
                    continue
                r = measure(handle, gpm, args.seconds, cycled(func, blocks, threads, duty))
                r.update(kernel=name, blocks=blocks, threads=threads, duty=duty)
                rows.append(r)
                show(r)
    with open(os.path.join(args.out, "power_grid.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
