"""`live`, issue 21's benchmark: gpufill beside live and dormant services, on the GPU machine.

Parts (`--parts`, comma-separated):
- `hw`: the hardware tests (carry/hw-cuda, carry/hw-nvml) with --ignored.
- `yield`: `gpufill bench --targets 50` twice: how soon after NVML lists a newcomer
  gpufill yields (the newcomer hint: docs/benchmarks.md, "Live services").
- `cpu`: gpufill's CPU per thread (schedstat) on an idle GPU, beside a dormant holder,
  beside a live service (20 requests/s), and yielding to a busy job.
- `wake`: a service dormant for `--dormant` s between bursts of 5 requests, alone and
  with gpufill: what the first request after a dormant spell pays, the utilization
  held during the spells, the probes and pauses.
- `ab`: live services (isolated sub-millisecond requests at 20/s and 2/s, GPU-bound
  matmul requests at 5/s, a launch-bound GPT-2 service at 5/s), alone / with gpufill
  interleaved (`--pairs` pairs): p50, mean, p90, p99 by phase. Training jobs
  (`resnet50-train`, `gpt2-train`: steps back to back, each synchronised) the same way:
  their mean step time is the inverse of their throughput.

`--gpu N` runs everything on NVML GPU N (the workloads through CUDA_VISIBLE_DEVICES, set to
its UUID), so two runs can share a host of several GPUs. `--mps` starts an MPS control
daemon for the run (pipe and log directories under /tmp, this run's own), so the
workloads and gpufill are its clients; `--skip S` leaves each phase's first S seconds out
of its statistics (gpufill's start and stop included in both kinds of phase).

gpufill runs with the defaults except `yield.idle_grace_s = --grace` (default 4, instead
of 30, to fit the runs: it only scales when gpufill probes; see benchmarks.md).

Usage on the GPU machine (build here with scripts/build-carry.sh, carry `carry`):
  python3 scripts/lab.py live --out "$OUT" --parts hw,yield,cpu,wake
  python3 scripts/lab.py live --out "$OUT" --gpu 1 --mps --parts ab --pairs 5 \
      --phase 10 --skip 1 --ab "resnet50-train,gpt2-train"
Prints a short table; details go to $OUT/live-bench.json and the gpufill logs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from .lib import (ROOT, Gpufill, cpu_between, cpu_sample, fmt_spread, gpu_env, interleave,
                  neighbour_diffs, neighbour_ratios, parser, pct, python_child, scrape, state_of,
                  threads_line)

PORT = 9418  # plus the GPU's index


class Filling:
    """gpufill run on the run's GPU, `yield.idle_grace_s` = --grace; `load` adds keys of
    its [load] table ("key=value,..."); `last` holds its metrics just before the stop."""

    def __init__(self, a, log, extra=(), load=""):
        self.a, self.log, self.extra = a, log, list(extra)
        self.load = [kv for kv in load.split(",") if kv and kv != "default"]
        if a.max_kernel_us:
            self.load.append(f"max_kernel_us={a.max_kernel_us}")

    def __enter__(self):
        config = f"[yield]\nidle_grace_s = {self.a.grace}\n"
        if self.load:
            config += "[load]\n" + "".join(f"{kv.replace('=', ' = ', 1)}\n" for kv in self.load)
        self.port = PORT + self.a.gpu
        self.g = Gpufill(self.a.gpufill, ["--gpus", str(self.a.gpu), *self.extra], config=config,
                         port=self.port, log_path=self.log,
                         rust_log="gpufill=info,gpufill_runtime=debug")
        self.g.wait_healthy(5)
        self.p = self.g.proc
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.last = scrape(self.port)
        self.g.stop()


# ------------------------------------------------------------------ workload process
def worker(argv, build=None):
    """Follows a plan of segments; prints JSON: requests (t0, t1, segment), NVML samples.
    A request is `build`(model, device, opts) (default `service_request`), called
    `--warmup` times before the plan starts; `--opts` (JSON) is for `build`."""
    import pynvml
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--plan")
    p.add_argument("--model", default="mlp")
    p.add_argument("--out")
    p.add_argument("--nvml-index", type=int, default=0)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--opts", default="{}")
    a = p.parse_args(argv)
    plan = json.loads(a.plan)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    request = (build or service_request)(a.model, dev, json.loads(a.opts))
    busy = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(a.warmup):
        request()
    torch.cuda.synchronize()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(a.nvml_index)
    import random
    rng = random.Random(7)
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    while time.monotonic() < start_at:
        time.sleep(0.01)
    # NVML keeps only the last few seconds of samples: read them every 3 s.
    import threading
    util, done = [], threading.Event()
    newest = int(time.time() * 1e6)

    def sample():
        nonlocal newest
        try:
            _, new = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, newest)
        except pynvml.NVMLError:
            return
        for x in new:
            if x.timeStamp > newest:
                newest = x.timeStamp
                util.append((x.timeStamp / 1e6 - time.time() + time.monotonic(), x.sampleValue.uiVal))

    def sampler():
        while not done.wait(3.0):
            sample()
    reader = threading.Thread(target=sampler, daemon=True)
    reader.start()
    reqs, t = [], start_at
    for i, seg in enumerate(plan):
        end = t + seg["secs"]
        if seg["kind"] == "requests":
            # Every phase replays the same arrivals (seed 7, or the segment's "seed"), so
            # that alone and with runs differ in gpufill, not in when requests came.
            rng.seed(seg.get("seed", 7))
            nxt = t
            while True:
                nxt += (rng.expovariate(seg["rate"]) if seg.get("poisson", True)
                        else 1.0 / seg["rate"])
                if nxt >= end:
                    break
                while time.monotonic() < nxt:
                    time.sleep(min(0.002, max(0.0, nxt - time.monotonic())))
                t0 = time.monotonic()
                request()
                reqs.append((t0, time.monotonic(), i))
        elif seg["kind"] == "train":
            while time.monotonic() < end:
                t0 = time.monotonic()
                request()
                reqs.append((t0, time.monotonic(), i))
        elif seg["kind"] == "busy":
            while time.monotonic() < end:
                for _ in range(20):
                    busy @ busy
                torch.cuda.synchronize()
        while time.monotonic() < end:
            time.sleep(min(0.05, end - time.monotonic()))
        t = end
    done.set()
    reader.join()
    sample()
    with open(a.out, "w") as f:
        json.dump({"reqs": reqs, "util": util}, f)


def service_request(model, dev, opts=None):
    """One request of `model` on `dev`, synchronised: `mlp` (6 x 1024 bf16 layers, batch 1,
    its input copied in and its output out), `matmul` (10 bf16 4096 matmuls), `*-train`
    (a training step, as `training_step`), else a GPT-2 forward of 16 tokens. `opts` is
    unused here (the worker's other builders read it)."""
    import torch
    if model == "mlp":
        layers = []
        for _ in range(6):
            layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
        net = torch.nn.Sequential(*layers).to(dev, torch.bfloat16).eval()
        x = torch.randn(1, 1024, dtype=torch.bfloat16).pin_memory()

        def request():
            with torch.no_grad():
                net(x.to(dev, non_blocking=True)).cpu()
    elif model == "matmul":
        m = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

        def request():
            for _ in range(10):
                m @ m
            torch.cuda.synchronize()
    elif model.endswith("-train"):
        request = training_step(model, dev)
    else:
        from transformers import GPT2Config, GPT2LMHeadModel
        net = GPT2LMHeadModel(GPT2Config()).to(dev).eval()
        ids = torch.randint(0, 50257, (1, 16), device=dev)

        def request():
            with torch.no_grad():
                net(ids).logits[0, -1].argmax().item()
    return request


def training_step(model, dev, sync=True, batch=64, size=224):
    """One step of a torchvision ResNet (`resnet50...`, `resnet18...`: `batch` images of
    `size` x `size`) or GPT-2 (otherwise, 8 x 512) training on synthetic data, bf16
    autocast, AdamW, synchronised when `sync`: also `coresidence`'s and `gaps`'s training
    jobs."""
    import torch
    if model.startswith("resnet"):
        import torchvision
        net = getattr(torchvision.models, model.split("-")[0])(weights=None)
        net = net.to(dev).to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, size, size, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device=dev)

        def loss():
            return torch.nn.functional.cross_entropy(net(x), y)
    else:
        from transformers import GPT2Config, GPT2LMHeadModel
        net = GPT2LMHeadModel(GPT2Config()).to(dev)
        ids = torch.randint(0, 50257, (8, 512), device=dev)

        def loss():
            return net(ids, labels=ids).loss
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            l_ = loss()
        l_.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sync:
            torch.cuda.synchronize()
    return step


def start_worker(a, plan, model, lead=1.0, module="live", extra=()):
    """Starts a workload process (`module`'s `worker`, with `extra` arguments); once it is
    warm, its plan starts `lead` s later."""
    out = os.path.join(a.work, f"work-{time.monotonic():.0f}.json")
    p = subprocess.Popen(python_child(module, "worker", ["--plan", json.dumps(plan), "--model", model,
                                                        "--out", out, "--nvml-index", str(a.gpu),
                                                        *extra]),
                         stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=a.env)
    line = p.stdout.readline()
    if "ready" not in line:
        raise RuntimeError("worker failed")
    start_at = time.monotonic() + lead
    p.stdin.write(f"{start_at}\n")
    p.stdin.flush()
    return p, out, start_at


def finish_worker(p, out):
    p.wait(timeout=600)
    with open(out) as f:
        return json.load(f)


# ------------------------------------------------------------------ parts
def part_hw(a, res):
    for name in ("hw-cuda", "hw-nvml"):
        path = os.path.join(ROOT, "carry", name)
        r = subprocess.run([path, "--ignored", "--test-threads=1", "--nocapture"],
                           capture_output=True, text=True, timeout=300)
        with open(os.path.join(a.out, f"{name}.txt"), "w") as f:
            f.write(r.stdout + r.stderr)
        lines = [l for l in (r.stdout + r.stderr).splitlines()
                 if l.startswith("test result") or "FAILED" in l or l.startswith("hw: probes")
                 or l.startswith("hw: one-kernel")]
        print(f"{name}: " + " | ".join(lines[-6:]), flush=True)
        res[name] = lines


def part_yield(a, res):
    out = []
    for i in range(a.yield_runs):
        d = os.path.join(a.work, f"bench{i}")
        r = subprocess.run([a.gpufill, "bench", "--gpu", str(a.gpu), "--targets", "50", "--seconds", "6",
                            "--out", d],
                           capture_output=True, text=True, timeout=240)
        text = r.stdout + r.stderr
        with open(os.path.join(a.work, f"bench{i}.txt"), "w") as f:
            f.write(text)
        lines = [l for l in text.splitlines() if "yield" in l.lower() or "listed" in l.lower()]
        print(f"bench {i}: rc={r.returncode} " + " | ".join(lines[-4:]), flush=True)
        out.append(text)
    res["yield"] = out


def part_cpu(a, res):
    """gpufill's CPU in each state, with the state and utilization seen meanwhile."""
    plan = [{"kind": "idle", "secs": 24}, {"kind": "requests", "secs": 24, "rate": 20},
            {"kind": "busy", "secs": 16}]
    out = {}
    with Filling(a, os.path.join(a.out, f"gpufill-{a.tag}-cpu.log")) as g:
        time.sleep(3)
        s0, t0 = cpu_sample(g.p.pid), time.monotonic()
        time.sleep(10)
        out["idle GPU"] = (cpu_between(s0, cpu_sample(g.p.pid), time.monotonic() - t0),
                           scrape(g.port))
        p, path, start = start_worker(a, plan, "mlp")
        marks = {"beside a dormant holder": (start + 12, start + 23),
                 "beside a live service, holding off": (start + 34, start + 47),
                 "yielding to a busy job": (start + 52, start + 63)}
        for label, (b, e) in marks.items():
            time.sleep(max(0.0, b - time.monotonic()))
            s0, t0 = cpu_sample(g.p.pid), time.monotonic()
            time.sleep(max(0.0, e - time.monotonic()))
            out[label] = (cpu_between(s0, cpu_sample(g.p.pid), time.monotonic() - t0),
                          scrape(g.port))
        work = finish_worker(p, path)
    print("gpufill CPU by state (% of one core: total; per thread, with times scheduled and "
          "voluntary switches a second) and its metrics then:")
    for label, ((share, wakes, sleeps), m) in out.items():
        total = sum(share.values())
        print(f"  {label:38} {total:5.2f} %  [{threads_line(share, wakes, sleeps)}]  "
              f"state={state_of(m)} "
              f"duty={m.get('gpufill_duty_ratio', float('nan')):.2f} "
              f"beside={m.get('gpufill_filling_beside', float('nan')):.0f} "
              f"pauses={m.get('gpufill_pauses_total', float('nan')):.0f}", flush=True)
    dormant = [u for t, u in work["util"] if start + 12 <= t <= start + 23]
    print(f"  utilization beside the dormant holder: mean {statistics.mean(dormant) if dormant else float('nan'):.1f} % "
          f"over {len(dormant)} samples", flush=True)
    res["cpu"] = {k: v for k, v in out.items()}


def part_wake(a, res):
    """A service dormant for a while, then a burst of 5 requests, N times."""
    n, dormant = a.wake_spells, a.dormant
    plan = []
    for _ in range(n):
        plan += [{"kind": "idle", "secs": dormant},
                 {"kind": "requests", "secs": 0.5, "rate": 10, "poisson": False}]
    out = {}
    for mode in ("alone", "with"):
        p, path, start = start_worker(a, plan, "mlp")
        if mode == "with":
            with Filling(a, os.path.join(a.out, f"gpufill-{a.tag}-wake.log")) as g:
                work = finish_worker(p, path)
            m = g.last
        else:
            work = finish_worker(p, path)
            m = {}
        reqs = work["reqs"]
        firsts, rest = [], []
        for i in range(n):
            seg = [r for r in reqs if r[2] == 2 * i + 1]
            if seg:
                firsts.append((seg[0][1] - seg[0][0]) * 1e3)
                rest += [(r[1] - r[0]) * 1e3 for r in seg[1:]]
        # Utilization in the last 5 s of each dormant spell (gpufill fills beside a
        # dormant holder once a probe is clean: one idle grace, or two, after a burst).
        util = [u for t, u in work["util"] for i in range(n)
                if start + i * (dormant + 0.5) + dormant - 5 <= t <= start + i * (dormant + 0.5) + dormant - 0.3]
        out[mode] = {"firsts_ms": firsts, "rest_ms": rest, "util": util, "metrics": m}
        print(f"  wake {mode:6}: first request after a {dormant:.0f} s dormant spell (ms) "
              f"{[round(x, 3) for x in firsts]}; the 4 after it p50 {pct(rest, 50):.3f}; "
              f"utilization in the spells' last 5 s {statistics.mean(util) if util else float('nan'):.1f} %"
              + (f"; pauses {m.get('gpufill_pauses_total', 0):.0f}" if m else ""), flush=True)
    res["wake"] = out


def part_ab(a, res):
    """Alone and beside gpufill, interleaved: A W A W ... A. With --variants "V1;V2;..."
    the with-phases take the variants in turn (each its [load] keys, "default" for none),
    each compared with the alone phases on either side of it."""
    workloads = [("mlp", 20.0), ("mlp", 2.0), ("matmul", 5.0), ("gpt2", 5.0),
                 ("resnet50-train", None), ("gpt2-train", None)]
    names = a.ab.split(",") if a.ab else None
    variants = a.variants.split(";") if a.variants else ["default"]
    out = {}
    for model, rate in workloads:
        name = f"{model}@{rate:g}/s" if rate else model
        if names and name not in names:
            continue
        phases = interleave(a.pairs, variants)
        plan = [{"kind": "requests", "secs": a.phase, "rate": rate} if rate else
                {"kind": "train", "secs": a.phase} for _ in phases]
        p, path, start = start_worker(a, plan, model)
        runs = []
        for i, variant in enumerate(phases):
            p0 = start + i * a.phase
            time.sleep(max(0.0, p0 - time.monotonic()))
            if variant:
                log = os.path.join(a.out, f"gpufill-{a.tag}-ab-{name.replace('/', '')}.log")
                with Filling(a, log, load=variant) as g:
                    time.sleep(max(0.0, p0 + a.phase - 0.3 - time.monotonic()))
                runs.append(g.last)
            else:
                runs.append(None)
        work = finish_worker(p, path)
        stats = []
        for i, variant in enumerate(phases):
            lat = [(r[1] - r[0]) * 1e3 for r in work["reqs"]
                   if r[2] == i and r[0] >= start + i * a.phase + a.skip]
            stats.append({"n": len(lat), "p50": pct(lat, 50),
                          "mean": statistics.mean(lat) if lat else float("nan"),
                          "p90": pct(lat, 90), "p99": pct(lat, 99), "metrics": runs[i],
                          "variant": variant})
        out[name] = {}
        for variant in variants:
            ratios = {k: neighbour_ratios([s[k] for s in stats], phases, variant)
                      for k in ("p50", "mean", "p90")}
            d99 = neighbour_diffs([s["p99"] for s in stats], phases, variant)
            line = f"  {name:13}" + (f" [{variant}]" if len(variants) > 1 else "")
            for k, r in ratios.items():
                line += f" {k} {fmt_spread(r)}"
            line += f" p99 {fmt_spread(d99, 3, '+')} ms"
            ms = [s["metrics"] or {} for s in stats if s["variant"] == variant]
            line += f"; pauses {[round(m.get('gpufill_pauses_total', 0)) for m in ms]}"
            line += f"; duty at end {[round(m.get('gpufill_duty_ratio', float('nan')), 2) for m in ms]}"
            line += f"; memory MiB {[round(m.get('gpufill_memory_used_bytes', float('nan')) / 2**20) for m in ms]}"
            if variant == variants[-1]:
                line += f"; alone p50 {[round(s['p50'], 3) for s in stats[::2]]}"
            print(line, flush=True)
            out[name][variant] = {"ratios": ratios, "p99_diff_ms": d99}
        out[name]["stats"] = stats
    res["ab"] = out


def main(argv):
    ap = parser("live", __doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="hw,yield,cpu,wake")
    ap.add_argument("--gpufill", default=os.path.join(ROOT, "carry", "gpufill"))
    ap.add_argument("--grace", type=float, default=4.0)
    ap.add_argument("--yield-runs", type=int, default=2)
    ap.add_argument("--wake-spells", type=int, default=5)
    ap.add_argument("--dormant", type=float, default=14.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--phase", type=float, default=15.0)
    ap.add_argument("--ab", default="")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--mps", action="store_true")
    ap.add_argument("--skip", type=float, default=0.0)
    ap.add_argument("--max-kernel-us", type=int, default=0,
                    help="gpufill's load.max_kernel_us (0: the default)")
    ap.add_argument("--variants", default="",
                    help='the ab part\'s with-phases in turn, e.g. "default;max_kernel_us=200"')
    a = ap.parse_args(argv)
    a.work = f"/tmp/live-bench-{a.gpu}"
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    a.env = gpu_env(a.gpu)
    tag = a.tag = (f"gpu{a.gpu}" + ("-mps" if a.mps else "")
                   + (f"-k{a.max_kernel_us}" if a.max_kernel_us else ""))
    if a.mps:
        mps = {"CUDA_MPS_PIPE_DIRECTORY": f"/tmp/mps-pipe-{a.gpu}",
               "CUDA_MPS_LOG_DIRECTORY": f"/tmp/mps-log-{a.gpu}"}
        for d in mps.values():
            os.makedirs(d, exist_ok=True)
        os.environ.update(mps)  # gpufill's too
        a.env.update(mps)
        subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True, env=a.env)
        time.sleep(1)
    print(tag, subprocess.run(["nvidia-smi", "-i", str(a.gpu), "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True).stdout.strip(),
          flush=True)
    res = {"args": {k: v for k, v in vars(a).items() if k != "env"}}
    try:
        for part in a.parts.split(","):
            t = time.monotonic()
            {"hw": part_hw, "yield": part_yield, "cpu": part_cpu, "wake": part_wake, "ab": part_ab}[part](a, res)
            print(f"[{tag} {part}: {time.monotonic() - t:.0f} s]", flush=True)
    finally:
        if a.mps:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=a.env)
            time.sleep(1)
        with open(os.path.join(a.out, f"live-bench-{tag}.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
