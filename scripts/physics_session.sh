#!/usr/bin/env bash
# physics_session.sh [GPU] [ARGS...]: `lab.py physics` (time slicing between two CUDA
# contexts, no MPS) on GPU (NVML index or UUID, default 0), so that another run can use the
# host's other GPUs. ARGS go to the command (`--requests 100` for a shorter run). Reads the
# GPU's settings and compute policy, changes none. Under 5 minutes in all: the command is
# cut at PHYSICS_TIMEOUT s (270); at the defaults it takes about 2.5 minutes.
# Prints the command's table; host.txt, the table, the rows (CSV) and the summary (JSON) are
# packed into $OUT/physics-GPU.tgz (the device tool brings back at most 8 files).
# Usage (device tool, no carry): bash scripts/physics_session.sh 1
set -u
cd "$(dirname "$0")/.."
gpu=${1:-0}
[ $# -gt 0 ] && shift
tag=physics-$gpu
out=/tmp/$tag
rm -rf "$out"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
  date -u +%FT%TZ; hostname
  nvidia-smi -i "$gpu" --query-gpu=index,uuid,name,driver_version,compute_mode,persistence_mode,mig.mode.current,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi compute-policy -l
  nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv
  pgrep -a nvidia-cuda-mps || echo "no MPS daemon"
} >"$out/host.txt" 2>&1
grep -v "^$" "$out/host.txt"
timeout -k 10 "${PHYSICS_TIMEOUT:-270}" python3 scripts/lab.py physics --gpu "$gpu" --out "$out" "$@" 2>&1 \
  | tee "$out/physics.txt"
echo "physics exit ${PIPESTATUS[0]}"
[ -n "${OUT:-}" ] && tar czf "$OUT/$tag.tgz" -C /tmp "$tag" && echo "packed: $OUT/$tag.tgz"
exit 0
