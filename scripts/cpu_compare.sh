#!/usr/bin/env bash
# The launcher in the loop's thread against the previous build (a launcher thread of its
# own), side by side on one GPU: the hardware tests of gpufill-cuda, gpufill's CPU per
# thread at each build's defaults and at other ticks (3 interleaved repeats, medians),
# churn at the new defaults, then `gpufill bench` (tracking, memory, yield) at the new
# defaults. About 5 minutes.
#
# Build here: scripts/build-carry.sh, then put the previous build at carry/old/gpufill.
# On the GPU machine (carry: ["carry"]): bash scripts/cpu_compare.sh
set -uo pipefail
OUT=${OUT:-cpu-compare-out}
mkdir -p "$OUT"
export NO_COLOR=1 OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== hardware tests (gpufill-cuda)"
carry/hw-cuda --ignored --nocapture --test-threads 1 2>&1 |
  grep -E "^hw:|test result|panicked" | tee "$OUT/hw-cuda.txt"
echo "== CPU: old build (launcher thread) against new (launch in the loop thread)"
python3 scripts/cpu_sweep.py carry/gpufill --exe old=carry/old/gpufill --exe new=carry/gpufill \
  --configs new:20/20,old:10/20,new:10/20,new:40/40 --repeats 3 --hold 10 2>&1 |
  tee "$OUT/cpu_sweep.txt"
echo "== bench at the new defaults"
carry/gpufill bench --out "$OUT/bench" >"$OUT/bench.txt" 2>&1
tail -25 "$OUT/bench.txt"
tar -C "$OUT" -czf "$OUT/bench.tar.gz" bench && rm -rf "$OUT/bench"
