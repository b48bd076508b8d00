#!/usr/bin/env bash
# Steady-state CPU of `gpufill run` at the defaults in the host's PID view and inside a
# PID namespace of its own (where it also reads device memory every tick), interleaved,
# on an idle GPU 0: utime+stime from /proc/PID/stat over a window that starts 8 s after
# launch (start-up, CUDA and NVML initialisation, is left out), as a percent of one core.
# Usage: bash scripts/namespace_cpu.sh carry/gpufill [WINDOW_S] [PAIRS]
set -u
g=$(realpath "${1:-carry/gpufill}"); win=${2:-30}; pairs=${3:-3}
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # utime + stime, clock ticks
run() { # view
  if [ "$1" = namespace ]; then
    unshare --pid --fork --mount-proc "$g" run --gpus 0 --duration $((win + 12)) 2>/dev/null &
  else
    "$g" run --gpus 0 --duration $((win + 12)) 2>/dev/null &
  fi
  local launcher=$!
  sleep 8
  local pid; pid=$(pgrep -n -f "^$g run --gpus 0")
  local a; a=$(cpu "$pid"); sleep "$win"; local b; b=$(cpu "$pid")
  wait "$launcher"
  python3 -c "print(f'$1 {100*($b-$a)/$ticks/$win:.2f} % of a core over {$win} s')"
}
for _ in $(seq "$pairs"); do run host; run namespace; done
