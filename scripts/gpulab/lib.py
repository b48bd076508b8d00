"""The lab's shared library: what every measurement of gpufill on a GPU machine needs.

- gpufill's metrics endpoint: `fetch`, `parse_metrics`, `flat`, `scrape`;
- statistics: `pct` (nearest rank), `spread`, `mae`, `fmt`, `latency_line`;
- gpufill's log: `log_time` (the ISO stamp a line starts with);
- `Gpufill`: one way to start `gpufill run` (binary, flags, a config written for it, the
  metrics port), wait until it serves /healthz or logs a word, read its log, CPU and
  memory, and stop it with SIGTERM, checking that no gpufill is left;
- the host's /proc: CPU seconds per thread, schedstat and context switches;
- NVML through pynvml, imported on first use (`N`): utilization samples (`UtilTrace`),
  process lists, memory, UUIDs for CUDA_VISIBLE_DEVICES;
- interleaved A/B runs: `interleave` (alone, with, alone, ... alone) and
  `neighbour_ratios` (each with-run over the mean of the alone runs beside it);
- child Pythons: `torch_job`, `python_child` (a function of this package in a child).

Nothing here imports pynvml, torch or CuPy at import time, so every command's --help
works on a machine without them.
"""
import atexit
import datetime
import importlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(SCRIPTS)
SPIN_PTX = os.path.join(ROOT, "gpufill-cuda", "kernels", "spin.ptx")
CLK = os.sysconf("SC_CLK_TCK")


class _Lazy:
    """A module imported on its first attribute access."""

    def __init__(self, name):
        self._name, self._module = name, None

    def __getattr__(self, attr):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


N = _Lazy("pynvml")


# ------------------------------------------------------------------ metrics endpoint
def metrics_url(where, path="/metrics"):
    """`where` as a URL: a port on 127.0.0.1, or a base URL (a trailing /metrics or
    /healthz is replaced by `path`)."""
    if isinstance(where, int) or str(where).isdigit():
        return f"http://127.0.0.1:{where}{path}"
    base = re.sub(r"/(metrics|healthz)$", "", str(where).rstrip("/"))
    return base + path


def fetch(where, path="/metrics", timeout=1.0):
    """(status, text, content type) of GET `path`; None when nothing answers."""
    try:
        with urllib.request.urlopen(metrics_url(where, path), timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), e.headers.get("Content-Type")
    except (OSError, ValueError):
        return None


LINE = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s+(\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_metrics(text):
    """The sample lines of a Prometheus text page as [(name, {label: value}, value)];
    comments, blank lines and values that are not numbers are left out."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), value))
    return out


def flat(series, gpu=None):
    """{name: value} of gpufill's series, a series with a `state` label as
    "name.<state>"; with `gpu`, only that GPU's (and those with no gpu label). Where a
    name repeats (several GPUs, other labels), the first sample counts."""
    out = {}
    for name, labels, value in series:
        if not name.startswith("gpufill_"):
            continue
        if gpu is not None and labels.get("gpu", str(gpu)) != str(gpu):
            continue
        key = f"{name}.{labels['state']}" if "state" in labels else name
        out.setdefault(key, value)
    return out


def by_gpu(series):
    """{(name, gpu index, state label or ""): value} of the series with a `gpu` label."""
    return {(name, int(labels["gpu"]), labels.get("state", "")): value
            for name, labels, value in series if "gpu" in labels}


def scrape(where, gpu=None, timeout=1.0):
    """gpufill's metrics at `where` (a port or URL) as `flat` gives them; {} when the
    endpoint does not answer 200."""
    got = fetch(where, timeout=timeout)
    if not got or got[0] != 200:
        return {}
    return flat(parse_metrics(got[1]), gpu)


def scrape_by_gpu(where, timeout=1.0):
    """({(metric, gpu index, state label or ""): value}, the text) of the series at
    `where` that carry a `gpu` label (`by_gpu`); ({}, "") while nothing answers 200.
    For several GPUs at once, where `scrape` gives one GPU's."""
    got = fetch(where, timeout=timeout)
    if not got or got[0] != 200:
        return {}, ""
    return by_gpu(parse_metrics(got[1])), got[1]


def state_of(m):
    """The states whose `gpufill_state` series is 1 in a `flat` scrape."""
    return [k.split(".", 1)[1] for k, v in m.items() if k.startswith("gpufill_state.") and v == 1]


def healthy(where, timeout=1.0):
    """Whether /healthz answers 200 (every GPU's worker ticks)."""
    got = fetch(where, "/healthz", timeout)
    return bool(got) and got[0] == 200


# ------------------------------------------------------------------ statistics
def pct(xs, q):
    """The q-th percentile of xs (nearest rank); NaN for none."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))]


def mean(xs):
    """The mean, None for none."""
    xs = list(xs)
    return statistics.mean(xs) if xs else None


def mae(values, target):
    """Mean absolute error against `target`, None for no values."""
    return sum(abs(v - target) for v in values) / len(values) if values else None


def spread(xs):
    """(median, min, max) of xs."""
    return statistics.median(xs), min(xs), max(xs)


def fmt_spread(xs, p=4, sign=""):
    """"median [min-max]" (with sign="+": "+m [+a..+b]", for differences)."""
    m, lo, hi = spread(xs)
    if sign:
        return f"{m:+.{p}f} [{lo:+.{p}f}..{hi:+.{p}f}]"
    return f"{m:.{p}f} [{lo:.{p}f}-{hi:.{p}f}]"


def fmt(x, p=2):
    """A table cell: "-" for None, floats to `p` places."""
    if x is None:
        return "-"
    return f"{x:.{p}f}" if isinstance(x, float) else str(x)


def latency_line(name, width, lat):
    """One table line of request latencies (ms): n, p50, mean, p90, p99."""
    return (f"   {name:>{width}} n={len(lat):3d} p50 {pct(lat, 50):.3f} "
            f"mean {statistics.mean(lat):.3f} p90 {pct(lat, 90):.3f} p99 {pct(lat, 99):.3f}")


# ------------------------------------------------------------------ interleaved A/B
def interleave(pairs, variants=("with",)):
    """The phases of an A/B run: None for alone, else the variant, as alone, with,
    alone, with, ..., alone; the with-phases take the variants in turn, `pairs` each."""
    out = [None]
    for i in range(pairs * len(variants)):
        out += [variants[i % len(variants)], None]
    return out


def neighbour_ratios(values, phases, variant=None):
    """Per with-phase (of `variant`, or any): its value over the mean of the alone
    phases on either side."""
    return [values[i] / ((values[i - 1] + values[i + 1]) / 2)
            for i, v in enumerate(phases) if v is not None and (variant is None or v == variant)]


def neighbour_diffs(values, phases, variant=None):
    """Per with-phase: its value minus the mean of the alone phases on either side."""
    return [values[i] - (values[i - 1] + values[i + 1]) / 2
            for i, v in enumerate(phases) if v is not None and (variant is None or v == variant)]


def named_exe(spec):
    """`--exe` as (label, path): `LABEL=PATH`, or a bare PATH labelled by its file name."""
    label, sep, path = spec.partition("=")
    return (label, path) if sep else (os.path.basename(spec), spec)


def alternate(items, repeat):
    """`items` in order on even repeats and reversed on odd ones, so that no build or
    setting always runs first."""
    return list(items) if repeat % 2 == 0 else list(items)[::-1]


# ------------------------------------------------------------------ gpufill's log
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")


def log_time(line):
    """The Unix time of a log line's leading ISO stamp (NO_COLOR=1); None without one."""
    m = STAMP.match(line)
    if not m:
        return None
    stamp = m.group(1)
    if "." in stamp:  # fromisoformat takes at most 6 digits of a fraction before 3.11
        head, frac = stamp.split(".")
        stamp = f"{head}.{frac[:6]:0<6}"
    return datetime.datetime.fromisoformat(stamp + "+00:00").timestamp()


def leftover_gpufill():
    """PIDs of processes named gpufill still running (as `pgrep -x gpufill`)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "gpufill":
                    out.append(pid)
        except OSError:
            pass
    return out


_RUNNING = set()  # the Gpufill runs not yet stopped, stopped at exit


@atexit.register
def _stop_all():
    """Stops what a command left running when it ends early (an exception, SIGTERM from
    a `timeout`: the command's SIGTERM handler exits through here)."""
    for g in list(_RUNNING):
        g.stop(timeout=5)


class Gpufill:
    """A `gpufill run` (by default) in the background; its log goes to a file as it comes
    (`log_path`, else a temporary one) and is read back with each line's own time stamp.

    `config` (TOML text) is written to a file and passed with --config; `port` adds
    --metrics 127.0.0.1:PORT (0: any, read from the log); `flags` go before the command
    (`-v`); `env` adds to the environment (NO_COLOR=1 always, RUST_LOG=`rust_log` unless
    that is None).
    """

    def __init__(self, exe, args=(), *, log_path=None, config=None, port=None, env=None,
                 rust_log=None, flags=(), command="run", preexec=None):
        self.config_path = None
        if config is not None:
            fd, self.config_path = tempfile.mkstemp(suffix=".toml", prefix="gpufill-lab-")
            with os.fdopen(fd, "w") as f:
                f.write(config)
            args = [*args, "--config", self.config_path]
        if port is not None:
            args = [*args, "--metrics", f"127.0.0.1:{port}"]
        self.port = port or None
        self.cmd = [exe, *flags, command, *args]
        self.own_log = log_path is None  # a temporary one, removed at stop()
        self.log_path = log_path or tempfile.mkstemp(suffix=".log", prefix="gpufill-lab-")[1]
        with open(self.log_path, "a") as f:
            f.write(f"==== {' '.join(self.cmd)}\n")
        self._log = open(self.log_path, "a")
        self._read = open(self.log_path, errors="replace")
        self._read.seek(0, os.SEEK_END)
        self._partial = ""
        self.lines = []  # (Unix time or None, line)
        env = dict(os.environ, NO_COLOR="1", **(env or {}))
        if rust_log is not None:
            env["RUST_LOG"] = rust_log
        self._before = set(leftover_gpufill())
        self.left = []
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=self._log, env=env,
                                     preexec_fn=preexec)
        self.pid = self.proc.pid
        _RUNNING.add(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def poll_log(self):
        """Reads the lines logged since the last call; returns all of them (after
        `stop`, the lines read by then: stop reads the log a last time)."""
        if self._read.closed:
            return self.lines
        text = self._partial + self._read.read()
        *done, self._partial = text.split("\n")
        self.lines += [(log_time(line), line) for line in done]
        return self.lines

    def alive(self):
        return self.proc.poll() is None

    def wait_for(self, word, timeout=30.0, after=0.0):
        """The time stamp of the first log line at or after `after` that holds `word`
        (the wall clock when the line has none); None at `timeout` or exit."""
        end = time.time() + timeout
        while True:
            for t, line in self.poll_log():
                if word in line and (t is None or t >= after):
                    return t if t is not None else time.time()
            if not self.alive() or time.time() >= end:
                return None
            time.sleep(0.01)

    def first(self, word):
        """The first log line holding `word`, or None."""
        return next((line for _, line in self.poll_log() if word in line), None)

    def count(self, word, since=0.0, until=float("inf")):
        """Log lines holding `word` stamped in [since, until) (unstamped ones count
        when no window is given)."""
        whole = since == 0.0 and until == float("inf")
        return sum(1 for t, line in self.poll_log() if word in line
                   and ((t is None and whole) or (t is not None and since <= t < until)))

    def url(self, timeout=30.0):
        """The metrics URL gpufill logged (`metrics listening on ...`), or None."""
        if self.wait_for("metrics listening on http://", timeout) is None:
            return None
        return re.search(r"(http://\S+/metrics)", self.first("metrics listening on")).group(1)

    def wait_healthy(self, timeout=10.0, every=0.05):
        """Until /healthz answers 200 (every worker ticks); False at `timeout` or exit."""
        where = self.port if self.port else self.url(timeout)
        end = time.time() + timeout
        while where and time.time() < end and self.alive():
            if healthy(where):
                return True
            time.sleep(every)
        return False

    def scrape(self, gpu=None):
        where = self.port if self.port else self.url(5)
        return scrape(where, gpu) if where else {}

    def cpu(self):
        return cpu_seconds(self.pid)

    def rss_kib(self):
        return status_kib(self.pid, "VmRSS")

    def threads_cpu(self):
        """CPU seconds per thread name (gpufill-gpuN workers, launchers, ...)."""
        out = {}
        for key, secs in threads(self.pid).items():
            name = key.rsplit("/", 1)[0]
            out[name] = out.get(name, 0.0) + secs
        return out

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def stop(self, timeout=10.0):
        """SIGTERM (SIGKILL after `timeout`); returns (exit code, seconds to exit).
        `left` then holds the gpufill processes started since this one that still run
        (a child it left behind; or another run's, when runs overlap), with a warning."""
        if self not in _RUNNING:  # stopped already
            return self.proc.returncode, 0.0
        _RUNNING.discard(self)
        t = time.time()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        took = time.time() - t
        self.poll_log()
        self._log.close()
        self._read.close()
        for path in (self.config_path, self.own_log and self.log_path):
            if path and os.path.exists(path):
                os.unlink(path)
        self.left = sorted(set(leftover_gpufill()) - self._before)
        if self.left:
            print(f"lab: gpufill processes left after stopping {self.pid}: {self.left}",
                  file=sys.stderr, flush=True)
        return self.proc.returncode, took


# ------------------------------------------------------------------ the host's /proc
def task_cpu_seconds(task):
    """CPU seconds of one thread, `task` being e.g. "123/task/125": its run time from
    schedstat (nanoseconds), else utime+stime from stat (clock ticks of 10 ms)."""
    try:
        with open(f"/proc/{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{task}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / CLK


def threads(pid):
    """CPU seconds per thread as {"name/tid": seconds}; threads gone meanwhile are
    left out."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            out[f"{comm}/{tid}"] = task_cpu_seconds(f"{pid}/task/{tid}")
        except OSError:
            pass
    return out


def cpu_seconds(pid):
    """CPU seconds of process `pid`: the sum over its live threads."""
    return sum(threads(pid).values())


def status_kib(pid, key):
    """A "KiB" field of /proc/PID/status (VmRSS, VmHWM, Threads), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def per_thread(pid, file, parse):
    """Per thread ("name:tid"): `parse` of /proc/PID/task/TID/`file`'s text; threads
    gone meanwhile, or whose file does not parse, are left out."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/{file}") as f:
                out[f"{name}:{tid}"] = parse(f.read())
        except (OSError, KeyError, ValueError):
            continue
    return out


def parse_schedstat(text):
    run, _, slices = text.split()
    return int(run), int(slices)


def parse_switches(text):
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


def schedstat(pid):
    """Per thread ("name:tid"): (nanoseconds on a CPU, times scheduled), from schedstat."""
    return per_thread(pid, "schedstat", parse_schedstat)


def switches(pid):
    """Per thread ("name:tid"): (voluntary, involuntary) context switches, from status. A
    thread that sleeps (a tick's wait, or a driver call that waits for the GPU's
    firmware) switches voluntarily; one preempted, involuntarily."""
    return per_thread(pid, "status", parse_switches)


def cpu_sample(pid):
    return schedstat(pid), switches(pid)


def cpu_between(a, b, secs):
    """Between two `cpu_sample`s: per thread name (tids merged) the percent of a core,
    times scheduled a second and voluntary context switches a second."""
    share, wakes, sleeps = {}, {}, {}
    (a_sched, a_sw), (b_sched, b_sw) = a, b
    for k, (run, n) in b_sched.items():
        r0, n0 = a_sched.get(k, (0, 0))
        name = k.split(":")[0]
        share[name] = share.get(name, 0) + (run - r0) / secs / 1e7
        wakes[name] = wakes.get(name, 0) + (n - n0) / secs
    for k, (vol, _) in b_sw.items():
        name = k.split(":")[0]
        sleeps[name] = sleeps.get(name, 0) + (vol - a_sw.get(k, (0, 0))[0]) / secs
    return share, wakes, sleeps


def threads_line(share, wakes, sleeps):
    """"name cpu (wakes/s, vol/s), ..." of the threads above 0.005 % of a core."""
    return ", ".join(f"{k} {v:.2f} ({wakes.get(k, 0):.0f}/s, {sleeps.get(k, 0):.0f} vol/s)"
                     for k, v in sorted(share.items(), key=lambda x: -x[1]) if v > 0.005)


# ------------------------------------------------------------------ NVML
_nvml_up = []


def nvml():
    """pynvml, initialised once."""
    if not _nvml_up:
        N.nvmlInit()
        _nvml_up.append(True)
    return N


def handle(index=0):
    return nvml().nvmlDeviceGetHandleByIndex(index)


def samples_since(h, last_ts):
    """NVML's utilization samples newer than `last_ts` (microseconds) as [(Unix s, %)]."""
    try:
        _, s = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last_ts)
    except N.NVMLError as e:
        if e.value == N.NVML_ERROR_NOT_FOUND:
            return []
        raise
    return [(x.timeStamp / 1e6, x.sampleValue.uiVal) for x in s if x.timeStamp > last_ts]


class UtilTrace:
    """NVML's utilization samples of one GPU, read incrementally (NVML keeps only the
    last seconds): `read()` adds the new ones; `every` > 0 reads from a thread."""

    def __init__(self, h, since=None, every=0.0):
        self.h = h
        self.last = int((time.time() if since is None else since) * 1e6)
        self.samples = []  # (Unix s, %)
        self._stop = threading.Event()
        self._thread = None
        if every > 0:
            self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
            self._thread.start()

    def _run(self, every):
        while not self._stop.wait(every):
            self.read()

    def read(self):
        new = samples_since(self.h, self.last)
        if new:
            self.last = int(new[-1][0] * 1e6)
            self.samples += new
        return new

    def finish(self):
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.read()
        return self.samples

    def between(self, lo, hi=float("inf")):
        return [v for t, v in self.samples if lo <= t < hi]


class ClockPoll:
    """The SM clock of one GPU, MHz, read every `every` s from a thread
    (nvmlDeviceGetClockInfo; `read` in its place for tests): NVML's clock samples
    (nvmlDeviceGetSamples with NVML_PROCESSOR_CLK_SAMPLES) came back empty on H200s with
    driver 580.159.04. `finish()` and `between()` as UtilTrace's."""

    def __init__(self, h, every=0.1, read=None):
        self._read = read or (lambda: nvml().nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM))
        self.samples = []  # (Unix s, MHz)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every):
        while True:
            try:
                self.samples.append((time.time(), self._read()))
            except N.NVMLError:
                return
            if self._stop.wait(every):
                return

    def finish(self):
        self._stop.set()
        self._thread.join()
        return self.samples

    def between(self, lo, hi=float("inf")):
        return [v for t, v in self.samples if lo <= t < hi]


def pids_on(h):
    """PIDs NVML lists as compute processes on device handle `h`."""
    return [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]


def proc_mem_mib(h, pid):
    """The GPU memory NVML lists for `pid` on `h`, MiB; None when not listed."""
    for p in N.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == pid:
            return (p.usedGpuMemory or 0) / 2**20
    return None


def cuda_visible(index):
    """The CUDA_VISIBLE_DEVICES value for NVML GPU `index` (by UUID: orders may differ)."""
    uuid = nvml().nvmlDeviceGetUUID(handle(index))
    return uuid.decode() if isinstance(uuid, bytes) else uuid


def gpu_env(index, **extra):
    """The environment of a workload on NVML GPU `index`."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(index), **extra)


# ------------------------------------------------------------------ child processes
def torch_job(index, seconds, size=4096):
    """A foreign PyTorch job on NVML GPU `index`: a bf16 matmul loop for `seconds`."""
    code = (
        "import torch,time\n"
        f"a=torch.randn({size},{size},device='cuda',dtype=torch.bfloat16)\n"
        f"t=time.time()\nwhile time.time()-t<{seconds}:\n    a@a\n    torch.cuda.synchronize()\n")
    return subprocess.Popen([sys.executable, "-c", code], env=gpu_env(index))


def python_child(module, func, args=()):
    """The argv of a child Python that runs gpulab.`module`.`func`(argv)."""
    code = (f"import sys; sys.path.insert(0, {SCRIPTS!r}); "
            f"from gpulab.{module} import {func}; {func}(sys.argv[1:])")
    return [sys.executable, "-c", code, *args]


def out_dir(default):
    """$OUT, else `default`; made."""
    out = os.environ.get("OUT", default)
    os.makedirs(out, exist_ok=True)
    return out


def parser(command, doc):
    """The argument parser of `lab.py command`, its description the module's text."""
    import argparse
    return argparse.ArgumentParser(prog=f"lab.py {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
