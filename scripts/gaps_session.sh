#!/usr/bin/env bash
# gaps_session.sh GPU [WORKLOADS] [ARGS...]: `lab.py gaps` (issue 40, item 4: live work
# alone and beside gpufill filling its gaps, no MPS) on GPU (NVML index, default 0), so
# that another run can use the host's other GPUs. WORKLOADS: comma-separated, of
# train-input,decode,sub-ms,train-full,arrive (default train-input,sub-ms,decode); ARGS go
# to the command (`--pairs 6`, `--gpufill-args "--beside-live fill-gaps --max-cost 1"`).
# The command is cut at GAPS_TIMEOUT s (525, under 9 minutes with the packing); at the
# defaults (5 pairs, runs fitted to --budget 480 s) it prints its estimate first.
# Prints the command's output; that output, gaps-runs.jsonl, gaps-summary.json (with the
# host, GPU, driver and compute policy) and the gpufill logs are packed into
# $OUT/gaps-GPU.tgz (the device tool brings back at most 8 files).
# Usage (device tool, carry `carry`, built by scripts/build-carry.sh):
#   bash scripts/gaps_session.sh 1 train-input,sub-ms,decode
set -u
cd "$(dirname "$0")/.."
gpu=${1:-0}
[ $# -gt 0 ] && shift
workloads=train-input,sub-ms,decode
case "${1:-}" in ""|-*) ;; *) workloads=$1; shift ;; esac
tag=gaps-$gpu
out=/tmp/$tag
rm -rf "$out"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
timeout -k 10 "${GAPS_TIMEOUT:-525}" python3 scripts/lab.py gaps --gpu "$gpu" --workloads "$workloads" \
  --out "$out" "$@" 2>&1 | tee "$out/gaps.txt"
echo "gaps exit ${PIPESTATUS[0]}"
[ -n "${OUT:-}" ] && tar czf "$OUT/$tag.tgz" -C /tmp "$tag" && echo "packed: $OUT/$tag.tgz"
exit 0
