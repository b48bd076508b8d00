#!/usr/bin/env bash
# The launcher in the loop's thread against the previous build (a launcher thread of its
# own), side by side on one GPU: the hardware tests of gpufill-cuda (with the CPU cost of
# a tick and of a kernel launch), NVML call costs, gpufill's CPU per thread for each
# build and setting (3 interleaved repeats, medians), churn, then `gpufill bench`
# (tracking, memory, yield) at the new defaults. About 5 minutes.
#
# Build here: scripts/build-carry.sh, then put the previous build at carry/old/gpufill.
# On the GPU machine (carry: ["carry"]): bash scripts/cpu_compare.sh
# CONFIGS=label:tick/period[/max_kernel_us],... picks the rows; REPEATS (3) repeats them;
# TICK_COST=1 adds `lab.py tick-cost`; ROBUST=1 adds SIGKILL and churn runs; HW=0 skips
# the hardware tests; BENCH=0 skips the bench.
set -uo pipefail
OUT=${OUT:-cpu-compare-out}
CONFIGS=${CONFIGS:-new:20/20,old:10/20,new:20/20/5000,new:40/40}
mkdir -p "$OUT"
export NO_COLOR=1 OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${HW:-1}" != 0 ]; then
  echo "== hardware tests (gpufill-cuda)"
  carry/hw-cuda --ignored --nocapture --test-threads 1 2>&1 |
    grep -E "^hw:|test result|panicked" | tee "$OUT/hw-cuda.txt"
  echo "== NVML call costs"
  carry/hw-nvml --ignored --nocapture nvml_call_costs 2>&1 | grep -E "^ |test result|panicked" |
    tee "$OUT/hw-nvml.txt"
fi
if [ "${ROBUST:-0}" != 0 ]; then
  echo "== SIGKILL and churn at the new defaults"
  {
    PYTHONUNBUFFERED=1 timeout 90 python3 scripts/lab.py sigkill carry/gpufill --rounds 3
    PYTHONUNBUFFERED=1 timeout 120 python3 scripts/lab.py churn carry/gpufill --rate 3 --duration 30 --baseline 5
    echo "leftover gpufill processes: $(pgrep -x gpufill | wc -l)"
  } 2>&1 | tee "$OUT/robust.txt"
fi
echo "== CPU: old build (launcher thread) against new (launch in the loop thread)"
python3 scripts/lab.py cpu-sweep carry/gpufill --exe old=carry/old/gpufill --exe new=carry/gpufill \
  --configs "$CONFIGS" --repeats "${REPEATS:-3}" --hold 10 2>&1 | tee "$OUT/cpu_sweep.txt"
if [ "${TICK_COST:-0}" != 0 ]; then
  echo "== one tick of the loop thread, split"
  python3 scripts/lab.py tick-cost carry/gpufill --repeats 2 2>&1 | tee "$OUT/tick_cost.txt"
fi
if [ "${BENCH:-1}" != 0 ]; then
  echo "== bench at the new defaults"
  carry/gpufill bench --out "$OUT/bench" >"$OUT/bench.txt" 2>&1
  tail -25 "$OUT/bench.txt"
  tar -C "$OUT" -czf "$OUT/bench.tar.gz" bench && rm -rf "$OUT/bench"
fi
