#!/usr/bin/env bash
# The GPU runs of one device session on a host of 2 GPUs (nvidia-h100-x2), each call
# under 10 minutes; build here first with scripts/build-carry.sh, carry `carry`.
#   bash scripts/device_session.sh check    # the binary on an idle GPU against carry/old
#                                           # (pauses, timing lines), hw tests, smoke run,
#                                           # status, issue 25's multi-GPU run
#   bash scripts/device_session.sh states   # GPU 0: CPU by state, a waking holder; beside,
#                                           # GPU 1: services under MPS (20/s, matmul)
#   bash scripts/device_session.sh services # GPU 0: newcomer yield, services without MPS;
#                                           # beside, GPU 1: services under MPS (2/s, GPT-2)
#   bash scripts/device_session.sh training # GPU 1: training under MPS (5 pairs)
# and on one GPU (nvidia-h100-x1):
#   bash scripts/device_session.sh cpu      # CPU by state, carry/gpufill against carry/old
#   bash scripts/device_session.sh mps-scan # under MPS, the matmul service beside our
#                                           # kernels of 50 ms, 200 us and 50 us
#   bash scripts/device_session.sh final    # newcomer yield; without MPS the MLP at 2/s and
#                                           # GPT-2 (5 pairs); under MPS the MLP at 20/s and
#                                           # GPT-2 (3 pairs)
#   bash scripts/device_session.sh mps-graphs # the same, the defaults (graphs of 50 us
#                                           # kernels) against load.mps_kernel_us = 0
# Two GPUs' runs go side by side to fit the session's device time; each is interleaved
# alone/with on its own GPU, so the other's load falls on both kinds of phase.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/device-session}; mkdir -p "$out"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
lb="python3 scripts/lab.py live"
for part in "$@"; do
  case "$part" in
  check)
    for b in carry/old/gpufill carry/gpufill; do
      [ -x "$b" ] || continue
      log="$out/idle-$(basename "$(dirname "$b")").log"
      NO_COLOR=1 RUST_LOG=gpufill=info,gpufill_cuda=debug timeout 20 "$b" run --gpus 0 \
        --duration 10 >"$log" 2>&1
      echo "$b on an idle GPU for 10 s: $(grep -c 'paused' "$log") pauses," \
        "$(grep -c 'shows another context' "$log") groups judged as another context's"
      grep 'shows another context' "$log" | head -3 | cut -c1-300
    done
    $lb --out "$out/gpu0" --gpu 0 --parts hw
    OUT="$out/smoke" timeout 120 bash scripts/smoke_run.sh carry/gpufill 2>&1 | grep -v "^gpufill_state" | tail -14
    timeout 30 carry/gpufill status >"$out/status.txt" 2>&1; echo "status exit $?"
    OUT="$out/multi" timeout 240 python3 scripts/lab.py multi-gpu carry/gpufill 2>&1 | tee "$out/multi-gpu.txt" ;;
  states)
    timeout 300 $lb --out "$out/gpu0" --gpu 0 --parts cpu,wake --wake-spells 4 >"$out/gpu0-states.txt" 2>&1 &
    timeout 300 $lb --out "$out/gpu1-mps" --gpu 1 --mps --parts ab --pairs 5 --phase 10 \
      --ab "mlp@20/s,matmul@5/s" >"$out/gpu1-mps-a.txt" 2>&1 &
    wait; cat "$out/gpu0-states.txt" "$out/gpu1-mps-a.txt" ;;
  services)
    timeout 520 $lb --out "$out/gpu0" --gpu 0 --parts yield,ab --phase 12 \
      --ab "mlp@20/s,mlp@2/s,matmul@5/s,gpt2@5/s" >"$out/gpu0-services.txt" 2>&1 &
    timeout 520 $lb --out "$out/gpu1-mps" --gpu 1 --mps --parts ab --pairs 5 --phase 12 \
      --ab "mlp@2/s,gpt2@5/s" >"$out/gpu1-mps-b.txt" 2>&1 &
    wait; cat "$out/gpu0-services.txt" "$out/gpu1-mps-b.txt" ;;
  training)
    timeout 330 $lb --out "$out/gpu1-mps" --gpu 1 --mps --parts ab --pairs 5 --phase 10 --skip 1 \
      --ab resnet50-train,gpt2-train >"$out/gpu1-mps-train.txt" 2>&1; cat "$out/gpu1-mps-train.txt" ;;
  cpu)
    exes=(--exe new=carry/gpufill); [ -x carry/old/gpufill ] && exes+=(--exe old=carry/old/gpufill)
    timeout 480 python3 scripts/lab.py cpu-states "${exes[@]}" --repeats 3 --hold 5 --out "$out/cpu" \
      2>&1 | tee "$out/cpu-states.txt" ;;
  mps-scan)
    timeout 300 $lb --out "$out/gpu0-mps" --gpu 0 --mps --parts ab --pairs 3 --phase 8 \
      --ab matmul@5/s --variants "default;max_kernel_us=200;max_kernel_us=50" 2>&1 |
      tee "$out/mps-scan.txt" ;;
  mps-graphs)
    timeout 300 $lb --out "$out/gpu0-mps" --gpu 0 --mps --parts ab --pairs 3 --phase 8 \
      --ab matmul@5/s --variants "default;mps_kernel_us=0" 2>&1 | tee "$out/mps-graphs.txt" ;;
  final)
    timeout 330 $lb --out "$out/gpu0" --gpu 0 --parts yield,ab --yield-runs 1 --pairs 5 --phase 10 \
      --ab "mlp@2/s,gpt2@5/s" 2>&1 | tee "$out/final-services.txt"
    timeout 200 $lb --out "$out/gpu0-mps" --gpu 0 --mps --parts ab --pairs 3 --phase 8 \
      --ab "mlp@20/s,gpt2@5/s" 2>&1 | tee "$out/final-mps.txt" ;;
  *)
    echo "no part $part (costs and ioctls are retired: scripts/RETIRED.md)" >&2 ;;
  esac
done
