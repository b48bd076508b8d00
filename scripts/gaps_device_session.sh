#!/usr/bin/env bash
# The GPU runs of issue 40 (fill the gaps) and of the loop's restructuring (issue 38) on a
# host of two GPUs (nvidia-h200-x2), in two device calls one after the other. Build here
# first with scripts/build-carry.sh; carry `carry`.
#   bash scripts/gaps_device_session.sh start    # GPU 0: the build alone at the literal
#        defaults for 600 s, detached (nobody else on it: pauses, mean utilization); GPU 1:
#        lab.py physics (the time slicing between two contexts), then lab.py gaps
#        (train-input and sub-ms, alone and with gpufill filling their gaps, 5 pairs)
#   bash scripts/gaps_device_session.sh collect  # GPU 1: the gap launcher's hardware
#        tests; waits for the 600 s on GPU 0 to end, prints it and packs it into $OUT
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
mkdir -p /tmp/hj
case "${1:-}" in
start)
  { date -u +%FT%TZ; hostname
    nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,compute_mode --format=csv,noheader
    carry/gpufill --version; } | tee /tmp/hj/host.txt
  setsid nohup python3 scripts/lab.py jitter idle --exe carry/gpufill --gpu 0 --seconds 600 \
    --tag idle-new-gpu0 --out /tmp/hj >/tmp/hj/idle.txt 2>&1 </dev/null &
  PHYSICS_TIMEOUT=170 bash scripts/physics_session.sh 1 --requests 200 2>&1 | tail -32
  GAPS_TIMEOUT=380 bash scripts/gaps_session.sh 1 "${GAPS_WORKLOADS:-train-input,sub-ms}" \
    --pairs 5 --budget "${GAPS_BUDGET:-340}" ;;
collect)
  CUDA_VISIBLE_DEVICES=1 timeout 90 carry/hw-cuda --ignored --test-threads 1 gaps 2>&1 | tail -8
  while pgrep -f "lab.py jitter idle" >/dev/null; do sleep 2; done
  cat /tmp/hj/host.txt /tmp/hj/idle.txt
  [ -n "${OUT:-}" ] && tar czf "$OUT/hold.tgz" -C /tmp hj && echo "packed: $OUT/hold.tgz" ;;
*)
  echo "usage: $0 start | collect" >&2; exit 2 ;;
esac
