#!/usr/bin/env bash
# `gpufill bench` at several launch periods (tick = period), one after the other on one
# GPU: whether NVML's utilization follows the duty (the table's settle and MAE, and
# duty against utilization per target from bench.csv), and the yield test's timings.
# About 80 s per period. Build here with scripts/build-carry.sh; on the GPU machine
# (carry: ["carry"]): PERIODS="20 25 50" bash scripts/period_benches.sh
set -uo pipefail
OUT=${OUT:-period-benches-out}
mkdir -p "$OUT"
export NO_COLOR=1
for p in ${PERIODS:-20 25 50}; do
  cfg="$OUT/p$p.toml"
  printf 'tick_ms = %s\n[load]\nperiod_ms = %s\n' "$p" "$p" >"$cfg"
  echo "== tick = period = $p ms"
  carry/gpufill -q bench --config "$cfg" --seconds 12 --out "$OUT/p$p" 2>&1 | tail -14
  python3 - "$OUT/p$p/bench.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for target in sorted({float(r["target"]) for r in rows}):
    held = [r for r in rows if float(r["target"]) == target and r["util"] and r["state"] == "filling"]
    held = held[len(held) // 3:]  # after the first third
    util = [float(r["util"]) for r in held]
    duty = [float(r["duty"]) for r in held]
    print(f"  target {target:4.0f}: util {statistics.median(util):5.1f} (min {min(util):.0f}, max {max(util):.0f})"
          f" at duty {statistics.median(duty):5.1f} (min {min(duty):.1f}, max {max(duty):.1f})")
PY
  rm -f "$cfg"
done
tar -C "$OUT" -czf "$OUT/benches.tar.gz" $(cd "$OUT" && ls -d p*/) && rm -rf "$OUT"/p*/
