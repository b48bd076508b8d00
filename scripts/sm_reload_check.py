#!/usr/bin/env python3
"""A SIGHUP reload under `metric = "sm"` on a real GPU: the new target is held as SM
activity (the loop keeps its SM shaping), and a changed `load.kernel` is refused as
restart-only.

Starts `gpufill run --gpus 0 --config F --metrics 127.0.0.1:0` with `metric = "sm"` and
target 30, reads `gpufill_sm_activity_percent` and `gpufill_width_blocks` from the
endpoint after 4 s, rewrites F with target 50 (and `kernel = "spin"`), sends SIGHUP, and
reads them again 4 s later. Prints one line per phase and the reload's log lines.

    python3 scripts/sm_reload_check.py carry/gpufill      # about 15 s, one GPU
"""
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import Gpufill  # noqa: E402


def scrape(url):
    """`name` -> value of the first sample of each gpufill series."""
    values = {}
    for line in urllib.request.urlopen(url, timeout=2).read().decode().splitlines():
        m = re.match(r"(gpufill_[a-z_]+)\{[^}]*\} (\S+)$", line)
        if m and m.group(1) not in values:
            values[m.group(1)] = float(m.group(2))
    return values


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else "carry/gpufill"
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write('metric = "sm"\ntarget_percent = 30\n')
    cfg.close()
    g = Gpufill(exe, ["--gpus", "0", "--config", cfg.name, "--metrics", "127.0.0.1:0"])
    if g.wait_for("metrics listening", 30) is None or g.wait_for("filling", 30) is None:
        print("gpufill did not start:", *[l for _, l in g.lines[-5:]], sep="\n")
        sys.exit(1)
    line = next(l for _, l in g.lines if "metrics listening" in l)
    url = re.search(r"(http://\S+/metrics)", line).group(1)
    time.sleep(4)
    before = scrape(url)
    with open(cfg.name, "w") as f:
        f.write('metric = "sm"\ntarget_percent = 50\n[load]\nkernel = "spin"\n')
    sent = time.time()
    g.proc.send_signal(signal.SIGHUP)
    time.sleep(4)
    after = scrape(url)
    g.proc.terminate()
    g.proc.wait(timeout=10)
    os.unlink(cfg.name)
    for name, v in (("before (target 30)", before), ("after SIGHUP (target 50)", after)):
        print(f"{name:26} target {v.get('gpufill_target_percent')} "
              f"sm_activity {v.get('gpufill_sm_activity_percent')} "
              f"width {v.get('gpufill_width_blocks')} duty {v.get('gpufill_duty_ratio')} "
              f"utilization series present: {'gpufill_utilization_percent' in v}")
    for t, l in g.lines:
        if t >= sent and ("reload" in l or "restart" in l):
            print(f"  +{t - sent:.3f} s {l}")


if __name__ == "__main__":
    main()
