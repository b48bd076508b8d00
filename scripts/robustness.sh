#!/usr/bin/env bash
# Robustness on the GPU machine, in one call (about 8 minutes, one GPU):
# SIGKILL (3 rounds, ~40 s), churn (10 s alone + 60 s beside gpufill, ~90 s), long run
# (5 min with a PyTorch job every 60 s). Build here first:
#   scripts/build-carry.sh
#   (device, carry ["carry"]) bash scripts/robustness.sh
# Writes 6 files under $OUT: env.txt, sigkill.json, churn.json, long_run.json,
# gpufill.log (every gpufill run's log), summary.txt (the tables below).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
export OUT
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=index,name,uuid,driver_version,mig.mode.current --format=csv
  echo "gpufill: $(carry/gpufill --version 2>&1)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
{
  PYTHONUNBUFFERED=1 timeout 90 python3 scripts/lab.py sigkill carry/gpufill --rounds 3
  echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
  PYTHONUNBUFFERED=1 timeout 150 python3 scripts/lab.py churn carry/gpufill --rate 3 --duration 60 --baseline 10
  echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
  PYTHONUNBUFFERED=1 timeout 330 python3 scripts/lab.py long-run carry/gpufill --duration 300 --every 60 --job 15
  echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
} 2>&1 | tee "$OUT/summary.txt"
