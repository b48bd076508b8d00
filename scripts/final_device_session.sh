#!/usr/bin/env bash
# One device call on a host of two GPUs (nvidia-h200-x2), carry `carry` (build first):
# GPU 0: lab.py gaps for train-input and sub-ms (issue 40, item 4); GPU 1: lab.py gaps
# for decode, then scripts/mps_quit_check.sh (issue 39, item 1). Budgets fit one call.
#   bash scripts/final_device_session.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
( GAPS_TIMEOUT=${GPU1_GAPS_TIMEOUT:-230} bash scripts/gaps_session.sh 1 decode --pairs 5 \
    --budget "${GPU1_BUDGET:-200}" >/tmp/gaps1.txt 2>&1
  mkdir -p /tmp/mpsout
  OUT=/tmp/mpsout MPS_CHECK_GPU=1 timeout 200 bash scripts/mps_quit_check.sh carry/gpufill \
    >/tmp/mpsout/run.txt 2>&1
  [ -n "${OUT:-}" ] && tar czf "$OUT/mps.tgz" -C /tmp mpsout ) &
GAPS_TIMEOUT=${GPU0_GAPS_TIMEOUT:-420} bash scripts/gaps_session.sh 0 train-input,sub-ms --pairs 5 \
  --budget "${GPU0_BUDGET:-360}" 2>&1 | tail -30
wait
echo "==== GPU 1: decode"; tail -22 /tmp/gaps1.txt
echo "==== GPU 1: MPS quit"; tail -25 /tmp/mpsout/run.txt
