#!/usr/bin/env bash
# lab_smoke.sh: every quick lab command once, short, on GPU 0, to show the package works
# on a GPU machine (issue 32: the lab as one tool). Prints one line per command (exit
# status, seconds, last line of output); each command's whole output goes to $OUT/lab/.
# Usage (device tool, carry ["carry"]): bash scripts/lab_smoke.sh
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}/lab
mkdir -p "$out"
exe=carry/gpufill
run_one() { # name, then the command
  local name=$1; shift
  local t0=$SECONDS
  timeout 80 "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  printf '%-12s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(grep -v '^\s*$' "$out/$name.txt" | tail -1 | cut -c1-110)"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
only=${1:-}  # one command's name: run only that one
run() { [ -z "$only" ] || [ "$only" = "$1" ] || return 0; run_one "$@"; }
run track      python3 scripts/lab.py track --gpufill $exe --targets 50 --hold 10
run metrics    python3 scripts/lab.py metrics $exe
run sigkill    python3 scripts/lab.py sigkill $exe --rounds 2
run churn      python3 scripts/lab.py churn $exe --rate 3 --duration 20 --baseline 5
run cpu-states python3 scripts/lab.py cpu-states --exe $exe --repeats 1 --hold 5 --states idle,live --no-trace --out "$out/cpu-states"
run jitter     python3 scripts/lab.py jitter idle --exe $exe --gpu 0 --seconds 40 --tag smoke --out "$out/jitter"
run tick-cost  python3 scripts/lab.py tick-cost $exe --repeats 1 --hold 5
pgrep -x gpufill && echo "LEFT RUNNING: gpufill" || echo "nothing of ours left running"
