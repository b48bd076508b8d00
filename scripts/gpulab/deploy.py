"""`deploy`: check on a real GPU what the packaging in deploy/ assumes about gpufill.

Runs `gpufill run --gpus 0 --target 50 --duration 8` four times and reports, for each,
whether it reached `filling`, the utilization it held, its peak host memory (VmHWM, for
the container memory limits), threads, CPU and its GPU memory:

- default:      as this user, the normal environment;
- no-cache:     CUDA_CACHE_PATH and HOME unwritable, as under a read-only root
                filesystem (the container and the DaemonSet) without the /tmp volume;
- uid-65532:    as the image's unprivileged user 65532 with no groups (needs root to
                switch; skipped otherwise): the device nodes must allow it;
- metrics:      with `--metrics 127.0.0.1:PORT`: GET /metrics and list which of the
                metric names the Grafana dashboard queries are served (a build without
                the flag exits 2, reported as such).
Also records the device nodes' modes and whether systemd runs here.

Usage (about 60 s): python3 scripts/lab.py deploy carry/gpufill
Writes $OUT (or ./deploy-check-out): env.txt, runs.log, deploy_check.json.
"""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

from .lib import (N, Gpufill, cpu_seconds, fetch, handle, leftover_gpufill, out_dir, parser,
                  proc_mem_mib, status_kib)

DASHBOARD_METRICS = [
    "gpufill_target_percent", "gpufill_utilization_percent", "gpufill_duty_ratio",
    "gpufill_state", "gpufill_foreign_processes", "gpufill_yields_total",
    "gpufill_probe_faults_total", "gpufill_memory_used_bytes", "gpufill_power_watts",
    "gpufill_build_info",
]
UID = 65532


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_to(uid):
    def preexec():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return preexec


def run_case(name, exe, h, extra=(), env=None, preexec=None, port=None, seconds=8):
    g = Gpufill(exe, ["--gpus", "0", "--target", "50", "--duration", str(seconds), *extra],
                env=env, preexec=preexec)
    util, hwm, threads, mem, served, cpu0, cpu1, fill = [], None, None, [], None, None, None, None
    while g.alive() and time.time() < g.t0 + seconds + 5:
        time.sleep(0.2)
        hwm = status_kib(g.pid, "VmHWM") or hwm
        threads = status_kib(g.pid, "Threads") or threads
        fill = fill or g.wait_for("filling", timeout=0)
        if fill and time.time() > fill + 2:
            try:
                cpu1 = (time.time(), cpu_seconds(g.pid))
                cpu0 = cpu0 or cpu1
            except OSError:  # exited meanwhile
                pass
            util.append(N.nvmlDeviceGetUtilizationRates(h).gpu)
            m = proc_mem_mib(h, g.pid)
            if m is not None:
                mem.append(m)
            if port and served is None:
                served = dashboard_metrics(port)
    cpu = None
    if cpu0 and cpu1[0] > cpu0[0]:
        cpu = 100 * (cpu1[1] - cpu0[1]) / (cpu1[0] - cpu0[0])
    try:
        rc = g.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = "killed"
    g.stop()
    time.sleep(0.2)
    return {
        "case": name, "cmd": " ".join(g.cmd), "exit": rc,
        "filling_after_s": round(fill - g.t0, 3) if fill else None,
        "util_median": statistics.median(util) if util else None,
        "vmhwm_mib": round(hwm / 1024, 1) if hwm else None, "threads": threads,
        "cpu_pct_core": round(cpu, 2) if cpu is not None else None,
        "gpu_mem_mib": max(mem) if mem else None,
        "metrics_served": served, "log": [f"{line}" for _, line in g.lines],
    }


def dashboard_metrics(port):
    """Content type, line count, the first 40 lines, and which of the dashboard's metric
    names the endpoint does not serve."""
    got = fetch(port, timeout=2)
    if got is None:
        return {"error": "no answer"}
    _, text, ctype = got
    names = set(re.findall(r"^(gpufill_[a-z_]+)", text, re.M))
    return {"content_type": ctype, "missing": [m for m in DASHBOARD_METRICS if m not in names],
            "lines": len(text.splitlines()), "sample": text.splitlines()[:40]}


def environment():
    out = []
    for cmd in (["nvidia-smi", "--query-gpu=index,name,driver_version,compute_mode", "--format=csv"],
                ["sh", "-c", "ls -l /dev/nvidia* 2>&1"], ["sh", "-c", "ps -o comm= -p 1"],
                ["sh", "-c", "systemctl --version 2>&1 | head -1; systemctl is-system-running 2>&1"],
                ["id"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            out.append(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"$ {' '.join(cmd)}\n{e}\n")
    return "\n".join(out)


def main(argv):
    ap = parser("deploy", __doc__)
    ap.add_argument("gpufill", nargs="?", default="carry/gpufill")
    exe = os.path.abspath(ap.parse_args(argv).gpufill)
    out = out_dir("deploy-check-out")
    env_txt = environment()
    with open(os.path.join(out, "env.txt"), "w") as f:
        f.write(env_txt)
    print(env_txt)
    h = handle(0)
    results = [run_case("default", exe, h)]
    nowrite = {"HOME": "/nonexistent", "CUDA_CACHE_PATH": "/proc/gpufill-no-cache"}
    results.append(run_case("no-cache", exe, h, env=nowrite))
    if os.geteuid() == 0:
        # A copy any user can execute: the carried binary may sit under a private home.
        d = tempfile.mkdtemp()
        os.chmod(d, 0o755)
        copy = os.path.join(d, "gpufill")
        shutil.copy(exe, copy)
        os.chmod(copy, 0o755)
        results.append(run_case(f"uid-{UID}", copy, h, env=nowrite, preexec=drop_to(UID)))
        shutil.rmtree(d)
    else:
        results.append({"case": f"uid-{UID}", "skipped": "not root"})
    port = free_port()
    results.append(run_case("metrics", exe, h, extra=["--metrics", f"127.0.0.1:{port}"], port=port))
    with open(os.path.join(out, "runs.log"), "w") as f:
        for r in results:
            f.write(f"==== {r['case']}: {r.get('cmd', r.get('skipped'))}\n" + "\n".join(r.pop("log", [])) + "\n")
    with open(os.path.join(out, "deploy_check.json"), "w") as f:
        json.dump(results, f, indent=1)
    cols = ["case", "exit", "filling_after_s", "util_median", "vmhwm_mib", "threads", "cpu_pct_core", "gpu_mem_mib"]
    print("\n" + " ".join(f"{c:>15}" for c in cols))
    for r in results:
        print(" ".join(f"{str(r.get(c, '-')):>15}" for c in cols))
    m = results[-1].get("metrics_served")
    if m and "missing" in m:
        print(f"metrics: Content-Type {m['content_type']}, {m['lines']} lines, "
              f"dashboard metrics missing: {m['missing'] or 'none'}")
    else:
        print(f"metrics: {m or 'no endpoint (exit ' + str(results[-1]['exit']) + ')'}")
    print(f"leftover gpufill processes: {leftover_gpufill()}")
