"""Helpers shared by scripts/live_probe.py and scripts/live_service_bench.py (issue 21)."""
import os
import statistics


def pct(xs, q):
    """The q-th percentile of xs (nearest rank); NaN for none."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))]


def schedstat(pid):
    """Per thread ("name:tid"): (nanoseconds on a CPU, times scheduled), from schedstat."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, _, slices = f.read().split()
            out[f"{name}:{tid}"] = (int(run), int(slices))
        except OSError:
            continue
    return out


def switches(pid):
    """Per thread ("name:tid"): (voluntary, involuntary) context switches, from status. A
    thread that sleeps (a tick's wait, or a driver call that waits for the GPU's
    firmware) switches voluntarily; one preempted, involuntarily."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            out[f"{name}:{tid}"] = (int(fields["voluntary_ctxt_switches"]),
                                    int(fields["nonvoluntary_ctxt_switches"]))
        except (OSError, KeyError, ValueError):
            continue
    return out


def latency_line(name, width, lat):
    """One table line of request latencies (ms): n, p50, mean, p90, p99."""
    return (f"   {name:>{width}} n={len(lat):3d} p50 {pct(lat, 50):.3f} "
            f"mean {statistics.mean(lat):.3f} p90 {pct(lat, 90):.3f} p99 {pct(lat, 99):.3f}")
