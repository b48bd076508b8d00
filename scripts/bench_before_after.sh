#!/usr/bin/env bash
# bench_before_after.sh [PAIRS] [BENCH ARGS...]: `gpufill bench` of two builds on one GPU,
# interleaved (old, new, old, new, ...; PAIRS pairs, default 3), each at the same
# arguments (default `--targets 25,50,75 --seconds 10`: about 45 s a run with its yield
# test), then the new build's GPU hardware tests (carry/hw-cuda, carry/hw-nvml) when
# BEFORE_AFTER_HW=1. Prints the host, each run's table and yield test, and a last table of
# both builds side by side (median over the runs of mae_pts, util_% and pauses a target,
# and of the yield test's "yielding ... ms after it was listed").
# Builds: carry/gpufill (new) and carry/old/gpufill (old, e.g. 8bb42e7). Writes each run's
# bench.{svg,csv,json} and output under $OUT/bench-ba (packed as $OUT/bench-ba.tgz).
# Usage (device tool, carry `carry`, built by scripts/build-carry.sh):
#   bash scripts/bench_before_after.sh 3
set -u
cd "$(dirname "$0")/.."
pairs=${1:-3}
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--targets 25,50,75 --seconds 10)
out=/tmp/bench-ba
rm -rf "$out"; mkdir -p "$out"
{ date -u +%FT%TZ
  nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode --format=csv,noheader
  echo "new: $(carry/gpufill --version)"; echo "old: $(carry/old/gpufill --version)"; } |
  tee "$out/host.txt"
for i in $(seq 1 "$pairs"); do
  for build in old new; do
    exe=carry/gpufill; [ "$build" = old ] && exe=carry/old/gpufill
    run=$out/$build-$i
    mkdir -p "$run"
    timeout 200 "$exe" bench "${args[@]}" --out "$run" >"$run/out.txt" 2>&1
    echo "==== $build $i: exit $?"
    grep -vE "^ +[0-9]+ +(DEBUG|INFO)|^[0-9-]+T[0-9:.]+Z +(DEBUG|INFO)" "$run/out.txt" | tail -12
  done
done
python3 - "$out" "$pairs" <<'EOF'
import re, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
rows, yields = {}, {}
for build in ("old", "new"):
    for i in range(1, pairs + 1):
        try:
            text = open(f"{out}/{build}-{i}/out.txt").read()
        except OSError:
            continue
        for line in text.splitlines():
            f = line.split()
            if len(f) == 9 and re.fullmatch(r"[0-9.]+", f[0]):
                rows.setdefault((build, f[0]), []).append((float(f[2]), float(f[3]), int(f[8])))
            m = re.search(r"yielding ([0-9.]+) ms after it was listed", line)
            if m:
                yields.setdefault(build, []).append(float(m.group(1)))
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("\nmedian over the runs (old | new):")
print(f"{'target_%':>8} {'mae_pts':>15} {'util_%':>15} {'pauses':>11} {'runs':>6}")
for target in sorted({t for _, t in rows}, key=float):
    o, n = rows.get(("old", target), []), rows.get(("new", target), [])
    col = lambda k: f"{med([r[k] for r in o]):6.2f} | {med([r[k] for r in n]):6.2f}"
    print(f"{target:>8} {col(0):>15} {col(1):>15} {sum(r[2] for r in o):>4} | {sum(r[2] for r in n):<4} {len(o):>2}|{len(n):<2}")
print(f"yield, ms after listed: old {yields.get('old')} | new {yields.get('new')}")
EOF
if [ "${BEFORE_AFTER_HW:-0}" = 1 ]; then
  for t in carry/hw-cuda carry/hw-nvml; do
    echo "==== $t"
    timeout 150 "$t" --ignored --nocapture --test-threads 1 >"$out/$(basename "$t").log" 2>&1
    grep -E "^test .* (FAILED|ok|ignored)$|test result|panicked" "$out/$(basename "$t").log" | tail -40
  done
fi
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && tar czf "$OUT/bench-ba.tgz" -C /tmp bench-ba && echo "packed: $OUT/bench-ba.tgz"
exit 0
