#!/usr/bin/env bash
# The yield modes beyond presence, on one GPU with the current build: `activity` mode
# (scripts/activity_check.py: a PyTorch job idles 6 s, then works 10 s, alone and beside
# gpufill) and MPS (scripts/interference.py with an MPS control daemon, pipe and log under
# /tmp, stopped afterwards; gpufill finds the pipe and fills only the gap). About 4 min.
# Build here with scripts/build-carry.sh; on the GPU machine (carry: ["carry"]):
#   bash scripts/modes_check.sh
set -uo pipefail
OUT=${OUT:-modes-out}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
echo "== activity mode"
timeout 240 python3 scripts/activity_check.py carry/gpufill 6 10 2>&1 | tee "$OUT/activity.txt" | tail -4
echo "== under MPS"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && sleep 1
timeout 240 python3 scripts/interference.py --gpufill carry/gpufill --seconds 8 --repeats 2 2>&1 |
  tee "$OUT/mps.txt" | tail -3
echo quit | nvidia-cuda-mps-control
sleep 2
if pgrep -f nvidia-cuda-mps >/dev/null; then echo "MPS still running"; else echo "MPS stopped"; fi
