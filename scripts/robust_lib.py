"""Helpers shared by the robustness scripts (sigkill_check, churn, long_run, multi_gpu).

Runs on the GPU machine (python3, pynvml, torch; no Rust): starts `gpufill run`, reads
its log, CPU time and RSS from /proc, and NVML's process lists and samples. The NVML
sample reader and the CPU-time reader are gpu_bench.py's.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import pynvml as N

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import cpu_seconds, samples_since, task_cpu_seconds  # noqa: E402,F401

CHILD_PTX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "spin.ptx")


class Gpufill:
    """A `gpufill run` child whose stderr log is kept with arrival times."""

    def __init__(self, exe, args, log_path=None, env=None):
        self.cmd = [exe, "run"] + list(args)
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            self.cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=dict(os.environ, NO_COLOR="1", **(env or {})))
        self.pid = self.proc.pid
        self.lines = []  # (arrival time, line)
        self.log_path = log_path
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip()))

    def wait_for(self, word, timeout=30.0, after=0.0):
        """Arrival time of the first log line after `after` containing `word`, or None."""
        end = time.time() + timeout
        while time.time() < end:
            for t, line in list(self.lines):
                if t >= after and word in line:
                    return t
            if self.proc.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def count(self, word, since=0.0, until=float("inf")):
        return sum(1 for t, l in list(self.lines) if since <= t < until and word in l)

    def cpu(self):
        return cpu_seconds(self.pid)

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def threads_cpu(self):
        """CPU seconds per thread name (gpufill-gpuN workers, launchers, ...)."""
        out = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                out[name] = out.get(name, 0.0) + task_cpu_seconds(f"{self.pid}/task/{tid}")
            except OSError:
                pass
        return out

    def stop(self, timeout=10.0):
        """SIGTERM, wait; returns (exit code, seconds to exit)."""
        t = time.time()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=2)
        self.save_log()
        return self.proc.returncode, time.time() - t

    def save_log(self):
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(f"==== {' '.join(self.cmd)}\n")
                f.writelines(f"{t - self.t0:9.3f} {l}\n" for t, l in self.lines)


def pids_on(h):
    """PIDs NVML lists as compute processes on device handle `h`."""
    return [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]


def torch_job(index, seconds, size=4096):
    """A foreign PyTorch job on NVML GPU `index`: a matmul loop for `seconds`."""
    code = (
        "import torch,time\n"
        f"a=torch.randn({size},{size},device='cuda',dtype=torch.bfloat16)\n"
        f"t=time.time()\nwhile time.time()-t<{seconds}:\n    a@a\n    torch.cuda.synchronize()\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cuda_visible(index))
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def cuda_visible(index):
    """The CUDA_VISIBLE_DEVICES value for NVML GPU `index` (by UUID: orders may differ)."""
    h = N.nvmlDeviceGetHandleByIndex(index)
    uuid = N.nvmlDeviceGetUUID(h)
    return uuid.decode() if isinstance(uuid, bytes) else uuid


def mae(values, target):
    return sum(abs(v - target) for v in values) / len(values) if values else None


def fmt(x, p=2):
    if x is None:
        return "-"
    return f"{x:.{p}f}" if isinstance(x, float) else str(x)
