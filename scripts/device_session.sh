#!/usr/bin/env bash
# The GPU runs of one device session on a host of 2 GPUs (nvidia-h100-x2), in two calls
# of under 10 minutes each; build here first with scripts/build-carry.sh, carry `carry`.
#   bash scripts/device_session.sh 1   # hw tests, smoke run, status, issue 25's multi-GPU
#                                      # run, then GPU 0: CPU by state and a waking holder,
#                                      # beside GPU 1: training under MPS (5 pairs)
#   bash scripts/device_session.sh 2   # GPU 0: newcomer yield, services without MPS;
#                                      # beside GPU 1: the same services under MPS
# The two GPUs' runs go side by side to fit the session's device time; each is
# interleaved alone/with on its own GPU, so the other's load falls on both kinds of phase.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/device-session}; mkdir -p "$out"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
case "${1:-1}" in
1)
  python3 scripts/live_service_bench.py --out "$out/gpu0" --gpu 0 --parts hw
  OUT="$out/smoke" timeout 120 bash scripts/smoke_run.sh carry/gpufill 2>&1 | tail -25
  timeout 30 carry/gpufill status >"$out/status.txt" 2>&1; echo "status exit $?"; head -20 "$out/status.txt"
  OUT="$out/multi" timeout 240 python3 scripts/multi_gpu.py carry/gpufill 2>&1 | tee "$out/multi-gpu.txt"
  timeout 300 python3 scripts/live_service_bench.py --out "$out/gpu0" --gpu 0 --parts cpu,wake \
    --wake-spells 4 >"$out/gpu0.txt" 2>&1 &
  timeout 330 python3 scripts/live_service_bench.py --out "$out/gpu1-mps" --gpu 1 --mps --parts ab \
    --pairs 5 --phase 10 --skip 1 --ab resnet50-train,gpt2-train >"$out/gpu1-mps.txt" 2>&1 &
  wait
  cat "$out/gpu0.txt" "$out/gpu1-mps.txt" ;;
2)
  timeout 520 python3 scripts/live_service_bench.py --out "$out/gpu0" --gpu 0 --parts yield,ab \
    --phase 12 --ab "mlp@20/s,mlp@2/s,matmul@5/s,gpt2@5/s" >"$out/gpu0.txt" 2>&1 &
  timeout 520 python3 scripts/live_service_bench.py --out "$out/gpu1-mps" --gpu 1 --mps --parts ab \
    --phase 12 --ab "mlp@20/s,mlp@2/s,matmul@5/s,gpt2@5/s" >"$out/gpu1-mps.txt" 2>&1 &
  wait
  cat "$out/gpu0.txt" "$out/gpu1-mps.txt" ;;
esac
