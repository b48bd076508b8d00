#!/usr/bin/env bash
# `gpufill bench` on the GPU machine: the full default run (its table and files), then
# its errors: a GPU that does not exist, a busy GPU (refused), a busy GPU with --force.
#
#   scripts/build-carry.sh                 # here: release binary into carry/
#   (device, carry: ["carry"]) bash scripts/bench-check.sh      # about 2 minutes
#
# Writes under $OUT (5 files): bench/bench.svg, bench/bench.csv, bench/bench.json (the
# default run), bench.txt (its table and log), errors.txt (the error cases).
set -u
OUT=${OUT:-bench-out}
mkdir -p "$OUT/bench"
scratch=$(mktemp -d)

echo "== carry/gpufill bench --out \$OUT/bench (defaults: 10,25,50,75,90 for 15 s each, yield test)"
SECONDS=0
timeout 300 carry/gpufill bench --out "$OUT/bench" 2>&1 | tee "$OUT/bench.txt"
echo "exit ${PIPESTATUS[0]} after ${SECONDS} s" | tee -a "$OUT/bench.txt"

{
  echo "== --gpu 99: expect 'no GPU with index 99', exit 2"
  timeout 30 carry/gpufill bench --gpu 99 --out "$scratch/a"
  echo "exit $?"

  echo "== a CUDA process on the GPU: expect a refusal naming its PID, exit 1"
  rm -f "$scratch/ready"
  python3 -c "import torch,time; torch.zeros(1,device='cuda'); open('$scratch/ready','w').close(); time.sleep(40)" &
  job=$!
  for _ in $(seq 60); do [ -e "$scratch/ready" ] && break; sleep 0.5; done
  echo "holder pid $job ready: $([ -e "$scratch/ready" ] && echo yes || echo no)"
  timeout 30 carry/gpufill bench --targets 50 --seconds 2 --no-yield --out "$scratch/b"
  echo "exit $?"

  echo "== the same with --force: expect a row for 50 % (the holder ignored), exit 0"
  timeout 60 carry/gpufill bench --targets 50 --seconds 4 --no-yield --force --out "$scratch/c"
  echo "exit $?"
  kill "$job" 2>/dev/null
  wait "$job" 2>/dev/null
} 2>&1 | tee "$OUT/errors.txt"

rm -rf "$scratch"
echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
