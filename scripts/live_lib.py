"""Helpers shared by scripts/live_probe.py, scripts/live_service_bench.py (issue 21) and
scripts/host_jitter.py (issue 30)."""
import os
import statistics
import urllib.request


def scrape(port):
    """gpufill's metrics on 127.0.0.1:`port` as {name: value}, a state series as
    "gpufill_state.<state>"; {} when the endpoint does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except Exception:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("gpufill_"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if 'state="' in line:
                name += "." + line.split('state="', 1)[1].split('"', 1)[0]
            try:
                out[name] = float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def pct(xs, q):
    """The q-th percentile of xs (nearest rank); NaN for none."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))]


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


def schedstat(pid):
    """Per thread ("name:tid"): (nanoseconds on a CPU, times scheduled), from schedstat."""
    def parse(text):
        run, _, slices = text.split()
        return int(run), int(slices)
    return per_thread(pid, "schedstat", parse)


def switches(pid):
    """Per thread ("name:tid"): (voluntary, involuntary) context switches, from status. A
    thread that sleeps (a tick's wait, or a driver call that waits for the GPU's
    firmware) switches voluntarily; one preempted, involuntarily."""
    def parse(text):
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return (int(fields["voluntary_ctxt_switches"]),
                int(fields["nonvoluntary_ctxt_switches"]))
    return per_thread(pid, "status", parse)


def latency_line(name, width, lat):
    """One table line of request latencies (ms): n, p50, mean, p90, p99."""
    return (f"   {name:>{width}} n={len(lat):3d} p50 {pct(lat, 50):.3f} "
            f"mean {statistics.mean(lat):.3f} p90 {pct(lat, 90):.3f} p99 {pct(lat, 99):.3f}")
