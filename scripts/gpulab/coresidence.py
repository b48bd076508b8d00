"""`coresidence`, issue 16's co-residence benchmark: real work beside gpufill, interleaved A/B.

Parts (`--parts`, comma-separated):
- `service`: ResNet-50 (torchvision, batch 1, fp32), or with `--service-model matmul`
  GPU-bound requests of ten bf16 4096^2 matmuls, answering bursts of `--burst` requests
  every `--gap` s; p50/p99 of the requests and of each burst's first request, the NVML
  utilization held between bursts, gpufill's CPU.
- `notebook`: a notebook-like session: a process holds a context and, every `--nb-gap` s,
  runs one cell (a few hundred ms of bf16 matmuls); the cell's time, and utilization between
  cells.
- `mps`: under an MPS daemon (pipe and log dirs under /tmp), ResNet-50 training (synthetic
  data, batch 64, bf16 autocast) and GPT-2 (transformers, random init) training, throughput
  in iterations per second, with gpufill's mean duty while it ran.

Each part runs alone, with, alone, with, ... (`--pairs` pairs, one more `alone` at the end)
and reports, per pair, `with / mean(alone before, alone after)`: the median ratio and its
spread. gpufill is started before each `with` run and stopped after it.

Usage on the GPU machine (build here with scripts/build-carry.sh, carry `carry`):
  python3 scripts/lab.py coresidence --gpufill carry/gpufill --out "$OUT" [--parts ...] \
      -- --config scripts/coresidence-bench.toml
Extra flags for gpufill go after `--`.
"""
import argparse
import json
import os
import subprocess
import time

from .lib import (Gpufill, fmt_spread, interleave, neighbour_diffs, neighbour_ratios, parser, pct,
                  python_child, scrape)

PORT = 9417


class Filling:
    """gpufill run beside a workload: started, settled 1.5 s at the target, its CPU share
    of a core over the run."""

    def __init__(self, binary, extra, log):
        self.binary, self.extra, self.log = binary, extra, log

    def __enter__(self):
        self.g = Gpufill(self.binary, ["--gpus", "0", *self.extra], port=PORT, log_path=self.log,
                         rust_log="gpufill=info")
        self.g.wait_healthy(5)
        time.sleep(1.5)  # settle at the target
        self.cpu0 = (self.g.cpu(), time.monotonic())
        return self

    def __exit__(self, *exc):
        self.cpu = (self.g.cpu() - self.cpu0[0]) / (time.monotonic() - self.cpu0[1])
        self.g.stop()
        time.sleep(0.5)


class Sampler:
    """gpufill's metrics every 0.2 s in a thread, for the mean duty during a run."""

    def __init__(self):
        import threading
        self.samples, self.stop = [], False
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop:
            m = scrape(PORT)
            if m:
                self.samples.append((time.monotonic(), m))
            time.sleep(0.2)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()

    def mean(self, name, window=None):
        xs = [m[name] for t, m in self.samples
              if name in m and (window is None or window[0] <= t <= window[1])]
        return sum(xs) / len(xs) if xs else float("nan")


def worker(code, args):
    """Runs the workload `code` (service, notebook, train) in a child Python; returns its
    JSON."""
    out = subprocess.run(python_child("coresidence", "workload", [code, *args]),
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{code} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def workload(argv):
    """The child's side of `worker`."""
    {"service": w_service, "notebook": w_notebook, "train": w_train}[argv[0]](argv[1:])


def ab(name, run_once, gpufill, pairs, extra, outdir, metric):
    """alone, with, alone, ... ; returns the runs and per-pair ratios of `metric`."""
    runs = []
    phases = interleave(pairs)
    for with_ in phases:
        if with_:
            with Filling(gpufill, extra, os.path.join(outdir, f"gpufill-{name}.log")) as g:
                with Sampler() as s:
                    r = run_once()
                # While the workload's measured part ran (monotonic clock, shared).
                window = (r["t0"], r["t1"]) if "t0" in r else None
                r["duty"] = s.mean("gpufill_duty_ratio", window)
                r["beside"] = s.mean("gpufill_filling_beside", window)
                r["util_gpufill"] = s.mean("gpufill_utilization_percent", window)
            r["cpu"] = g.cpu
        else:
            r = run_once()
        r["with"] = bool(with_)
        runs.append(r)
        print(f"  {name} {'with ' if with_ else 'alone'} {metric}={r[metric]:.4f}"
              + (f" duty={r['duty']:.3f} beside={r['beside']:.2f} cpu={100 * r['cpu']:.2f}%"
                 if with_ else ""),
              flush=True)
    return runs, neighbour_ratios([r[metric] for r in runs], phases)


def outside(samples, spans, after):
    """NVML utilization samples from the first span on whose 200 ms window meets no span
    (from 10 ms before it starts to `after` s after it ends); spans are
    (start, end, ...) in Unix seconds."""
    return [s.sampleValue.uiVal for s in samples
            if s.timeStamp / 1e6 > spans[0][0] and not any(
                sp[0] - 0.01 < s.timeStamp / 1e6 and s.timeStamp / 1e6 - 0.22 < sp[1] + after
                for sp in spans)]


# ------------------------------------------------------------------------- workloads
def w_service(argv):
    """ResNet-50 batch 1 in bursts; prints request latencies and NVML samples."""
    import pynvml
    import torch
    import torchvision
    p = argparse.ArgumentParser()
    p.add_argument("--bursts", type=int)
    p.add_argument("--burst", type=int)
    p.add_argument("--gap", type=float)
    p.add_argument("--quiet", type=float)
    p.add_argument("--model", default="resnet50")
    a = p.parse_args(argv)
    # Autotuning picks algorithms by timing, differently in each process (the p50 of
    # runs alone then varied by 30 %): off.
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    if a.model == "resnet50":
        model = torchvision.models.resnet50(weights=None).to(dev).eval()
        x = torch.randn(1, 3, 224, 224).pin_memory()

        def request():
            t = time.perf_counter()
            with torch.no_grad():
                model(x.to(dev, non_blocking=True)).cpu()
            return (time.perf_counter() - t) * 1e3
    else:
        # GPU-bound requests: ten bf16 4096^2 matmuls (about 2 ms), as in gpu-facts'
        # launch-shape probe; far less noisy than Python-bound ResNet-50 requests.
        m = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

        def request():
            t = time.perf_counter()
            for _ in range(10):
                m @ m
            torch.cuda.synchronize()
            return (time.perf_counter() - t) * 1e3

    for _ in range(100):
        request()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    # Quiet a while first: gpufill (activity mode) fills beside a holder only once it
    # has been quiet for the idle grace.
    time.sleep(a.quiet)
    wall0 = int(time.time() * 1e6)
    t0 = time.monotonic()
    bursts = []
    t_next = time.monotonic()
    for _ in range(a.bursts):
        time.sleep(max(0.0, t_next - time.monotonic()))
        s = time.time()
        lat = [request() for _ in range(a.burst)]
        bursts.append((s, time.time(), lat))
        t_next += a.gap
    time.sleep(max(0.0, t_next - time.monotonic()))
    _, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, wall0)
    # Utilization between bursts: samples whose window (200 ms) meets no burst, from the
    # first burst on (gpufill has had a gap to settle).
    quiet = outside(samples, bursts, 0.05)
    # Steady: samples from 1 s after a burst ended to the next burst (the pause that
    # follows a burst excluded).
    steady = outside(samples, bursts, 1.0)
    lat = [v for _, _, l in bursts for v in l]
    first = [l[0] for _, _, l in bursts]
    print(json.dumps({"t0": t0, "t1": time.monotonic(),
                      "p50": pct(lat, 50), "p99": pct(lat, 99), "max": max(lat),
                      "first_p50": pct(first, 50), "first_max": max(first),
                      "util_between": sum(quiet) / len(quiet) if quiet else float("nan"),
                      "util_steady": sum(steady) / len(steady) if steady else float("nan"),
                      "util_n": len(quiet), "lat": lat}))


def w_notebook(argv):
    """A context held all along; every gap one 'cell' of bf16 matmuls."""
    import pynvml
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--cells", type=int)
    p.add_argument("--gap", type=float)
    p.add_argument("--quiet", type=float)
    a = p.parse_args(argv)
    a_ = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    time.sleep(a.quiet)
    wall0 = int(time.time() * 1e6)
    t0 = time.monotonic()
    cells = []
    for _ in range(a.cells):
        s = time.time()
        t = time.perf_counter()
        for _ in range(2000):
            b = a_ @ a_
        b.sum().item()
        cells.append((s, time.time(), (time.perf_counter() - t) * 1e3))
        time.sleep(a.gap)
    _, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, wall0)
    quiet = outside(samples, cells, 0.05)
    ms = [c for _, _, c in cells]
    print(json.dumps({"t0": t0, "t1": time.monotonic(),
                      "cell_p50": pct(ms, 50), "cell_max": max(ms),
                      "util_between": sum(quiet) / len(quiet) if quiet else float("nan"),
                      "util_n": len(quiet)}))


def w_train(argv):
    """ResNet-50 or GPT-2 training on synthetic data; prints iterations per second."""
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--iters", type=int)
    a = p.parse_args(argv)
    from .live import training_step
    dev = torch.device("cuda")
    # Autotuning picks algorithms by timing, differently from run to run: off, so each
    # run trains with the same kernels.
    torch.backends.cudnn.benchmark = False
    step = training_step(a.model, dev, sync=False)
    for _ in range(15):
        step()
    torch.cuda.synchronize()
    t0 = time.monotonic()
    t = time.perf_counter()
    for _ in range(a.iters):
        step()
    torch.cuda.synchronize()
    print(json.dumps({"t0": t0, "t1": time.monotonic(),
                      "its": a.iters / (time.perf_counter() - t)}))


# ------------------------------------------------------------------------- parts
def summary(name, ratios, extra=""):
    print(f"{name}: median {fmt_spread(ratios)} over {len(ratios)} pairs {extra}", flush=True)


def part_service(a, extra, out):
    res = {}
    runs, r50 = ab("service", lambda: worker("service", [
        "--bursts", str(a.bursts), "--burst", str(a.burst), "--gap", str(a.gap),
        "--quiet", str(a.quiet), "--model", a.service_model]),
        a.gpufill, a.pairs, extra, out, "p50")
    phases = interleave(a.pairs)
    r99 = neighbour_diffs([r["p99"] for r in runs], phases)
    rf = neighbour_ratios([r["first_p50"] for r in runs], phases)
    withs = [r for r in runs if r["with"]]
    summary("service p50 ratio", r50)
    print(f"service p99 difference (ms): median {fmt_spread(r99, 3, '+')}; first request p50 "
          f"ratio {fmt_spread(rf)}")
    print(f"service util between bursts with gpufill: "
          f"{[round(r['util_between'], 1) for r in withs]}, from 1 s after each burst: "
          f"{[round(r['util_steady'], 1) for r in withs]}, alone: "
          f"{[round(r['util_between'], 1) for r in runs if not r['with']]}; "
          f"gpufill CPU {[round(100 * r['cpu'], 2) for r in withs]} %")
    res["service"] = {"runs": runs, "p50_ratios": r50, "p99_diff_ms": r99, "first_ratios": rf}
    return res


def part_notebook(a, extra, out):
    runs, rc = ab("notebook", lambda: worker("notebook", [
        "--cells", str(a.cells), "--gap", str(a.nb_gap), "--quiet", str(a.quiet)]),
        a.gpufill, a.pairs, extra, out, "cell_p50")
    withs = [r for r in runs if r["with"]]
    summary("notebook cell time ratio", rc)
    print(f"notebook util between cells with gpufill: "
          f"{[round(r['util_between'], 1) for r in withs]}; "
          f"gpufill CPU {[round(100 * r['cpu'], 2) for r in withs]} %")
    return {"notebook": {"runs": runs, "ratios": rc}}


def part_mps(a, extra, out):
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/mps-log"}
    os.environ.update(env)
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True)
    time.sleep(1)
    res = {}
    try:
        for model, iters in (("resnet50", a.resnet_iters), ("gpt2", a.gpt2_iters)):
            runs, r = ab(f"mps-{model}", lambda: worker("train", [
                "--model", model, "--iters", str(iters)]),
                a.gpufill, a.pairs, extra, out, "its")
            summary(f"MPS {model} throughput ratio", r,
                    f"duty {[round(x['duty'], 3) for x in runs if x['with']]}")
            res[f"mps-{model}"] = {"runs": runs, "ratios": r}
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True)
        time.sleep(1)
    return res


def main(argv):
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = parser("coresidence", __doc__)
    p.add_argument("--gpufill", default="carry/gpufill")
    p.add_argument("--out", default="/tmp/coresidence")
    p.add_argument("--parts", default="service,notebook,mps")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--bursts", type=int, default=6)
    p.add_argument("--burst", type=int, default=20)
    p.add_argument("--gap", type=float, default=3.0)
    p.add_argument("--quiet", type=float, default=5.0,
                   help="s a workload holds its context quietly before its bursts or cells: "
                        "longer than gpufill's idle grace (pass a config with idle_grace_s)")
    p.add_argument("--service-model", default="resnet50", choices=["resnet50", "matmul"],
                   help="the service's requests: ResNet-50 at batch 1 (CPU-bound), or ten "
                        "bf16 4096^2 matmuls (GPU-bound)")
    p.add_argument("--cells", type=int, default=5)
    p.add_argument("--nb-gap", type=float, default=2.0)
    p.add_argument("--resnet-iters", type=int, default=200)
    p.add_argument("--gpt2-iters", type=int, default=80)
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    res = {"args": vars(a), "gpufill_args": extra}
    for part in a.parts.split(","):
        print(f"== {part}", flush=True)
        res.update({"service": part_service, "notebook": part_notebook,
                    "mps": part_mps}[part](a, extra, a.out))
    with open(os.path.join(a.out, "coresidence-bench.json"), "w") as f:
        json.dump(res, f)
