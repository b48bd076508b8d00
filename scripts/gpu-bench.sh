#!/usr/bin/env bash
# The GPU measurement of gpufill, in one call on the GPU machine (no Rust there).
#
# Build here first, then run this there with the binaries carried:
#   scripts/build-carry.sh            # builds release binaries into carry/
#   (device) bash scripts/gpu-bench.sh [extra args for `lab.py track`]
# Writes at most 8 files under $OUT: env.txt, hardware.log, status.txt, tracking.json,
# bench.txt, runs.log.
set -u
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode,power.limit,clocks.max.sm --format=csv
  nvidia-smi -q | grep -iE "^ *(MIG Mode|Current) *:|Compute Mode" | head -5
  echo "mps control daemon: $(pgrep -f nvidia-cuda-mps-control >/dev/null && echo running || echo off)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== hardware tests"
for t in carry/hw-*; do
  [ -x "$t" ] || continue
  echo "---- $t"
  timeout 120 "$t" --ignored --nocapture --test-threads 1
done >"$OUT/hardware.log" 2>&1
grep -E "^test |test result|panicked" "$OUT/hardware.log"

echo "== gpufill status"
timeout 20 carry/gpufill status >"$OUT/status.txt" 2>&1
cat "$OUT/status.txt"

echo "== tracking, memory, CPU, power, stop"
PYTHONUNBUFFERED=1 timeout 400 python3 scripts/lab.py track --gpufill carry/gpufill "$@" 2>&1 | tee "$OUT/bench.txt"
echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
