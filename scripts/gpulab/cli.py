"""The lab's commands: which module runs each, and which figure of docs/benchmarks.md
(by section heading) it reproduces."""
import importlib
import signal
import sys

# name: (module, function, what it measures, the section of docs/benchmarks.md it
# reproduces, or of docs/benchmarks-history.md where it says so)
COMMANDS = {
    "track": ("track", "main", "tracking, settle, memory, CPU, power and stop per target",
              "Tracking, memory, CPU, power, stop (in benchmarks-history.md)"),
    "sm-track": ("sm_track", "main", "metric = \"sm\": GPM SM tracking and power against "
                 "one warp and a full grid", "SM activity: `metric = \"sm\"`"),
    "metrics": ("endpoint", "metrics", "the metrics endpoint against NVML, its CPU, SIGHUP "
                "reloads, a foreign job", "Metrics endpoint and SIGHUP reload"),
    "sm-reload": ("endpoint", "sm_reload", "a SIGHUP reload under metric = \"sm\"",
                  "A reload under `metric = \"sm\"`"),
    "sample": ("endpoint", "sample", "one scrape of a running gpufill as a JSON line "
               "(mps_follow_check.sh's probe)", "MPS followed live"),
    "deploy": ("deploy", "main", "what the packaging in deploy/ assumes: cache, uid, "
               "memory, dashboard metrics", "What the packaging assumes"),
    "sigkill": ("robust", "sigkill", "SIGKILL: ms until the GPU is free",
                "Faults: SIGKILL, churn, long run"),
    "churn": ("robust", "churn", "short-lived CUDA processes at N/s beside gpufill",
              "Faults: SIGKILL, churn, long run"),
    "long-run": ("robust", "long_run", "minutes of filling with a foreign job every minute",
                 "Faults: SIGKILL, churn, long run"),
    "multi-gpu": ("multi_gpu", "main", "the agent on every GPU of a host; a holder and a "
                  "service on two GPUs", "Many GPUs"),
    "cpu-sweep": ("cpu", "sweep", "CPU per thread against tick and launch period, builds "
                  "interleaved", "CPU against tick and launch period (in benchmarks-history.md); "
                  "Launching from the "
                  "loop's thread"),
    "tick-cost": ("cpu", "tick_cost", "one tick of the loop thread, split by subtraction",
                  "Launching from the loop's thread (Where a tick's CPU goes)"),
    "cpu-states": ("cpu", "states", "CPU by state (idle, holder, live, busy), builds "
                   "interleaved", "Live services: Graphs of short kernels under MPS, and "
                   "the CPU by state"),
    "coresidence": ("coresidence", "main", "a ResNet-50 service, a notebook, MPS training "
                    "beside gpufill, A/B", "Beside a mostly-idle service, and under MPS"),
    "live": ("live", "main", "live and dormant services beside gpufill: yield, CPU, wake, "
             "A/B", "Live services (each subsection)"),
    "jitter": ("jitter", "main", "start jitter on an empty GPU: idle, holder, bursting, "
               "sweep, analyze", "Start jitter on an empty GPU"),
    "physics": ("physics", "main", "time slicing between two contexts: a job's wait beside "
                "our kernels, queued or with gaps; the switch", "none yet"),
    "gaps": ("gaps", "main", "live work alone and beside gpufill filling its gaps (no MPS): "
             "cost, GPU, duty, estimate, CPU, reasons", "none yet (issue 40, item 4)"),
}

USAGE = """usage: python3 scripts/lab.py COMMAND [ARGS...]   (or, from scripts/: python3 -m gpulab)

gpufill's measurements on a GPU machine (python3 with pynvml, PyTorch, CuPy there; build
the binary here with scripts/build-carry.sh and carry `carry`). `COMMAND --help` says
more. Each reproduces the figures of one section of docs/benchmarks.md:
"""


def usage():
    width = max(map(len, COMMANDS))
    rows = [f"  {name:{width}}  {what}\n  {'':{width}}  -> {section}"
            for name, (_, _, what, section) in COMMANDS.items()]
    return USAGE + "\n".join(rows) + "\n"


def main(argv):
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"lab: no command {name!r}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    # SIGTERM (a `timeout`, the device tool's limit) exits like an exception, so that
    # `with` blocks and lib's exit handler stop the gpufill a command started: a gpufill
    # left running would hold the GPU, and the next run's would be refused it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    module, func, _, _ = COMMANDS[name]
    run = getattr(importlib.import_module(f"gpulab.{module}"), func)
    return run(rest) or 0
