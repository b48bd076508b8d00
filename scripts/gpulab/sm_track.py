"""`sm-track`: `metric = "sm"` on a real GPU (issue 6): tracking of GPM SM utilization, and power.

1. For each SM target (10/30/50/70 %) runs `gpufill run --metric sm --target T` for
   `--hold` s (20) and samples, every 200 ms: GPM SM utilization (pynvml GPM bindings;
   when they are missing or refused, gpufill's own `-v` log lines, which carry the GPM
   reading as `util=`), board power and NVML utilization. Settle (within 2 points, from
   gpufill's `filling` line) and MAE as in `track`; power is the mean after settling.
2. (a) `gpufill run --metric util` at the NVML utilization that run 1 showed, one warp:
   the same time share with one SM instead of a wide grid.
3. (b) a full-grid `spin` (gpufill-cuda/kernels/spin.ptx, sm_count x 8 blocks of 256 threads) launched
   from CuPy in a child process, duty-cycled on a 20 ms period to the same SM utilization
   (duty = T / the SM utilization it reads at full duty): the naive wide filler.

Prints a table; writes $OUT/sm_check.json and $OUT/sm_runs.log. About 3.5 minutes with
the defaults. Usage (GPU machine, release binary carried in carry/):

    python3 scripts/lab.py sm-track --gpufill carry/gpufill [--targets 10,30,50,70]
        [--hold 20] [--kernel spin|sleep]
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from .lib import N, SPIN_PTX, Gpufill, handle, out_dir, parser
from .track import settle_and_mae

PERIOD_S = 0.2


class Gpm:
    """GPM SM utilization between successive `read()` calls; `ok` false when pynvml
    lacks the bindings or NVML refuses (then the caller falls back to gpufill's log)."""

    def __init__(self, h):
        self.h, self.prev, self.ok, self.why = h, None, False, ""
        try:
            if not N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                self.why = "GPU has no GPM"
                return
            self.prev = self._sample()
            self.ok = True
        except (AttributeError, N.NVMLError) as e:
            self.why = f"{type(e).__name__}: {e}"

    def _sample(self):
        s = N.nvmlGpmSampleAlloc()
        N.nvmlGpmSampleGet(self.h, s)
        return s

    def read(self):
        if not self.ok:
            return None
        try:
            cur = self._sample()
            g = N.c_nvmlGpmMetricsGet_t()
            g.version = N.NVML_GPM_METRICS_GET_VERSION
            g.numMetrics = 1
            g.sample1, g.sample2 = self.prev, cur
            g.metrics[0].metricId = N.NVML_GPM_METRIC_SM_UTIL
            N.nvmlGpmMetricsGet(g)
            N.nvmlGpmSampleFree(self.prev)
            self.prev = cur
            return float(g.metrics[0].value)
        except (AttributeError, N.NVMLError) as e:
            self.ok, self.why = False, f"{type(e).__name__}: {e}"
            return None


def field(line, name):
    m = re.search(rf"\b{name}=([0-9.]+)", line)
    return float(m.group(1)) if m else None


def watch(h, gpm, seconds, stop=None):
    """Samples (t, gpm_sm, power_w, nvml_util) every 200 ms for `seconds`."""
    rows, end = [], time.time() + seconds
    while time.time() < end and not (stop and stop()):
        time.sleep(PERIOD_S)
        rows.append((time.time(), gpm.read(), N.nvmlDeviceGetPowerUsage(h) / 1000,
                     N.nvmlDeviceGetUtilizationRates(h).gpu))
    return rows


def gpufill_run(args, h, gpm, flags, seconds, runs_log):
    kernel = ["--kernel", args.kernel] if args.kernel else []
    t0 = time.time()
    g = Gpufill(args.gpufill, ["--gpus", "0", "--duration", str(seconds), *flags, *kernel],
                flags=["-v"], log_path=runs_log)
    rows = watch(h, gpm, seconds + 3, stop=lambda: not g.alive())
    code, _ = g.stop(timeout=5)
    fill = next((t for t, line in g.lines if " filling" in line), None)
    # Judge only while gpufill ran: the samples after its stop (the loop's "GPU idle"
    # line) read the idle GPU and would count as off target.
    stop = next((t for t, line in g.lines if "GPU idle" in line), None)
    if stop is not None:
        rows = [r for r in rows if r[0] < stop - 0.2]
    samples = [(t, line) for t, line in g.lines if " sample " in line]
    return t0, fill, rows, samples, code


def steady(rows, col, start):
    vals = [r[col] for r in rows if r[0] >= start and r[col] is not None]
    return statistics.fmean(vals) if vals else None


def sm_run(args, h, gpm, target, runs_log):
    t0, fill, rows, logged, code = gpufill_run(
        args, h, gpm, ["--metric", "sm", "--target", str(target)], args.hold, runs_log)
    source = "pynvml-gpm" if any(r[1] is not None for r in rows) else "gpufill-log"
    if source == "pynvml-gpm":
        series = [(r[0], r[1]) for r in rows if r[1] is not None]
    else:
        series = [(t, field(l, "util")) for t, l in logged if t and field(l, "util") is not None]
    start = fill or t0
    settle, mae, held = settle_and_mae(series, start, target, args.hold)
    from_t = start + (settle if settle is not None else 3.0)
    last = logged[-1][1] if logged else ""
    return {
        "target": target, "source": source, "exit_code": code, "settle_s": settle, "mae_points": mae,
        "held_samples": len(held), "sm_mean": steady([(t, v) for t, v in series], 1, from_t),
        "power_w": steady(rows, 2, from_t), "nvml_util": steady(rows, 3, from_t),
        "width": field(last, "width"), "duty": field(last, "duty"),
        "series": [(round(t - t0, 3), v) for t, v in series],
    }


def util_run(args, h, gpm, util, runs_log):
    t0, fill, rows, _, code = gpufill_run(
        args, h, gpm, ["--metric", "util", "--target", f"{util:.1f}"], args.cmp_hold, runs_log)
    from_t = (fill or t0) + 3.0
    return {"nvml_target": util, "exit_code": code, "power_w": steady(rows, 2, from_t),
            "nvml_util": steady(rows, 3, from_t), "gpm_sm": steady(rows, 1, from_t)}


CHILD = r'''
import json, sys, time
import cupy as cp
ptx, plan, period = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
spin = cp.RawModule(path=ptx).get_function("spin")
grid, block = (sms * 8,), (256,)
spin(grid, block, (cp.uint64(1000),)); cp.cuda.Device(0).synchronize()
print(f"READY {sms}", flush=True)
for duty, seconds in plan:
    print(f"PHASE {time.time():.6f} {duty}", flush=True)
    end = time.time() + seconds; nxt = time.time()
    while time.time() < end:
        on = int(duty * period * 1e9)
        if on > 5000:
            spin(grid, block, (cp.uint64(on),)); cp.cuda.Device(0).synchronize()
        nxt += period
        time.sleep(max(0.0, nxt - time.time()))
print(f"END {time.time():.6f}", flush=True)
'''


def full_grid(args, h, gpm, targets):
    """Calibrates at full duty, then duty-cycles to each target; returns per target the
    GPM SM utilization and power measured meanwhile."""
    def phases(plan):
        p = subprocess.Popen([sys.executable, "-c", CHILD, SPIN_PTX, json.dumps(plan), "0.02"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        marks, rows = [], []
        th = threading.Thread(target=lambda: [marks.append(l.split()) for l in p.stdout], daemon=True)
        th.start()
        while p.poll() is None:
            rows += watch(h, gpm, 0.2 * 5)
        th.join(timeout=1)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.read()[-1500:])
        starts = [(float(m[1]), float(m[2])) for m in marks if m[0] == "PHASE"]
        end = next(float(m[1]) for m in marks if m[0] == "END")
        out = []
        for i, (t, duty) in enumerate(starts):
            stop = starts[i + 1][0] if i + 1 < len(starts) else end
            part = [r for r in rows if t + 2.0 <= r[0] < stop]
            out.append({"duty": duty, "gpm_sm": steady(part, 1, 0), "power_w": steady(part, 2, 0),
                        "nvml_util": steady(part, 3, 0)})
        return out

    calib = phases([[1.0, 4.0]])[0]
    full = calib["gpm_sm"] or 91.6
    plan = [[min(1.0, t / full), args.cmp_hold] for t in targets]
    return calib, [dict(r, target=t) for t, r in zip(targets, phases(plan))]


def main(argv):
    ap = parser("sm-track", __doc__)
    ap.add_argument("--gpufill", default="carry/gpufill")
    ap.add_argument("--targets", default="10,30,50,70")
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--cmp-hold", type=float, default=8.0)
    ap.add_argument("--kernel", choices=["spin", "sleep"], help="gpufill's kernel (default: its own)")
    args = ap.parse_args(argv)
    out = out_dir("bench-out")
    h = handle(0)
    gpm = Gpm(h)
    idle = watch(h, gpm, 1.6)
    env = {"gpu": N.nvmlDeviceGetName(h), "driver": N.nvmlSystemGetDriverVersion(),
           "kernel": args.kernel or "gpufill default", "gpm_in_script": gpm.ok, "gpm_why_not": gpm.why,
           "idle_power_w": statistics.fmean(r[2] for r in idle),
           "idle_gpm_sm": steady(idle, 1, 0)}
    print(json.dumps(env), flush=True)
    targets = [float(t) for t in args.targets.split(",")]
    runs_log = os.path.join(out, "sm_runs.log")
    sm = [sm_run(args, h, gpm, t, runs_log) for t in targets]
    one_warp = [util_run(args, h, gpm, r["nvml_util"] or r["target"], runs_log) for r in sm]
    try:
        calib, grid = full_grid(args, h, gpm, targets)
    except Exception as e:  # noqa: BLE001 (CuPy missing or failing: report, keep the rest)
        calib, grid = {"error": str(e)}, [{} for _ in targets]
    with open(os.path.join(out, "sm_check.json"), "w") as f:
        json.dump({"env": env, "sm": sm, "util_one_warp": one_warp, "full_grid_calibration": calib,
                   "full_grid": grid}, f, indent=1)
    def fmt(x, p=1):
        return "-" if x is None else f"{x:.{p}f}"
    print("target src    settle_s mae  sm    width duty  nvml  P_sm_W | P_util1warp_W (nvml) "
          "| P_fullgrid_W (sm)")
    for r, a, b in zip(sm, one_warp, grid):
        print(f"{r['target']:6.0f} {r['source'][:6]:6s} {fmt(r['settle_s'], 2):8s} "
              f"{fmt(r['mae_points'], 2):4s} {fmt(r['sm_mean']):5s} {fmt(r['width'], 0):5s} "
              f"{fmt(r['duty']):5s} {fmt(r['nvml_util']):5s} {fmt(r['power_w'], 0):6s} | "
              f"{fmt(a.get('power_w'), 0):>5s} ({fmt(a.get('nvml_util'))}) | "
              f"{fmt(b.get('power_w'), 0):>5s} ({fmt(b.get('gpm_sm'))})")
    print(f"full grid at 100 % duty: {calib}")
