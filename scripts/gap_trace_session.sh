#!/usr/bin/env bash
# gap_trace_session.sh [JOBS] [ARGS...]: scripts/gap_trace.py's `beside` part on GPU 0,
# once at the defaults (--beside-live fill-gaps, --max-cost 2) and once with the cost bound
# out of the way (--max-cost 100: the hold stays at its shortest), so that what the pacer
# fills and what the rate control takes off can be told apart. JOBS: train, decode or
# train,decode (default train). ARGS go to gap_trace.py. Logs and JSON under $OUT/bound-*.
# BOUNDS="2" runs the first only.
# Usage (device tool, carry `carry`):  bash scripts/gap_trace_session.sh train
set -u
cd "$(dirname "$0")/.."
jobs=${1:-train}
[ $# -gt 0 ] && shift
base=${OUT:-/tmp/gap-trace}
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv,noheader
nvidia-smi compute-policy -l 2>/dev/null | head -5
carry/gpufill --version 2>/dev/null || true
for bound in ${BOUNDS:-2 100}; do
  echo "=== --max-cost $bound"
  OUT=$base/bound-$bound python3 scripts/gap_trace.py --gpu 0 --parts beside --jobs "$jobs" \
    --gpufill-args "--beside-live fill-gaps --max-cost $bound" "$@" 2>&1 | grep -v Warning
done
