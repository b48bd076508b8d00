#!/usr/bin/env bash
# gaps_cpu_calls.sh [ROUNDS]: where the pacing thread's CPU goes while filling gaps, and
# the gaps shape's CPU per kernel for two builds of the hardware tests, interleaved.
# Runs `cpu_per_driver_call_and_wake_up` (this thread's CPU per driver call, per timed
# wake-up and per gaps cycle) with carry/hw-cuda, then ROUNDS (default 3) rounds of
# `filling_gaps_alone_...` with carry/old/hw-cuda and carry/hw-cuda, old first.
# Prints the `hw:` lines; the whole output goes to $OUT/gaps-cpu-calls.txt.
# Usage (device tool, carry `carry`, built by scripts/build-carry.sh; the old build's
# hw-cuda copied to carry/old/hw-cuda):
#   bash scripts/gaps_cpu_calls.sh 3
set -u
cd "$(dirname "$0")/.."
rounds=${1:-3}
log=${OUT:-/tmp}/gaps-cpu-calls.txt
: >"$log"
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv,noheader | tee -a "$log"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/tree: /' | tee -a "$log"
run() { # BUILD TEST
  echo "== $1: $2" | tee -a "$log"
  "$1" --ignored --exact "$2" --nocapture --test-threads=1 >/tmp/gaps-cpu-one.txt 2>&1
  echo "exit $?" >>/tmp/gaps-cpu-one.txt
  cat /tmp/gaps-cpu-one.txt >>"$log"
  grep -E "^hw:|panicked|^exit" /tmp/gaps-cpu-one.txt
}
run carry/hw-cuda cpu_per_driver_call_and_wake_up
gaps=filling_gaps_alone_launches_short_kernels_with_gaps_meets_nobody_and_holds_after_a_meeting
for _ in $(seq "$rounds"); do
  run carry/old/hw-cuda "$gaps"
  run carry/hw-cuda "$gaps"
done
