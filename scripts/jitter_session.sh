#!/usr/bin/env bash
# Issue 30's GPU runs on a host of two GPUs (nvidia-h100-x2). Build here first with
# scripts/build-carry.sh, and 052ca04's binary into carry/old/gpufill; carry `carry`.
#   bash scripts/jitter_session.sh start [GPU] [SECS]  # the new build alone at the
#        literal defaults, detached (it outlives the call); results in /tmp/hj
#   bash scripts/jitter_session.sh beside [GPU]        # on the other GPU: 052ca04 alone
#        60 s (does this host stall?); the new build beside a dormant holder, a holder
#        with a 0.5 s burst every 2 minutes, a live service (sub-ms requests at 20/s,
#        3 pairs), a newcomer (the yield), and inside a PID namespace of its own
#   bash scripts/jitter_session.sh extra [GPU]         # on the other GPU, the final build:
#        052ca04 alone 60 s, a dormant holder, gpufill bench, the live service, and
#        issue 33's MPS follow (scripts/mps_follow_check.sh)
#   bash scripts/jitter_session.sh hold [SECS]         # nobody else on the GPUs: the new
#        build on GPU 0 and 052ca04 (carry/old/gpufill) on GPU 1, both at the literal
#        defaults for SECS (600), detached, in the same run; results in /tmp/hj
#   bash scripts/jitter_session.sh collect             # waits for `start`/`hold`, copies to $OUT
set -u
cd "$(dirname "$0")/.."
# Details go to /tmp/js-PART, packed into one file under $OUT at the end (the device tool
# brings back at most 8 files).
part=${1:-}
out=/tmp/js-$part; mkdir -p "$out" /tmp/hj
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/$part.tgz" -C /tmp "js-$part"; }
export PYTHONUNBUFFERED=1
J="python3 scripts/lab.py jitter"
info() {
  hostname
  nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,compute_mode --format=csv,noheader
}
# 052ca04 alone for a minute on GPU $1: whether this host stalls enough to pause it.
old_alone() {
  [ -x carry/old/gpufill ] || return 0
  timeout 100 $J idle --exe carry/old/gpufill --gpu "$1" --seconds 60 --tag "idle-old-gpu$1" --out "$out"
}
# The live service of sub-ms requests at 20/s on GPU $1, 3 pairs alone/with.
live_service() {
  timeout 120 python3 scripts/lab.py live --out "$out" --gpu "$1" --parts ab \
    --pairs 3 --phase 10 --ab "mlp@20/s" 2>&1 | tail -2
}
case "$part" in
start)
  gpu=${2:-0}; secs=${3:-600}
  info >/tmp/hj/host.txt
  setsid nohup $J idle --gpu "$gpu" --seconds "$secs" --tag "idle-new-gpu$gpu" --out /tmp/hj \
    >/tmp/hj/idle.txt 2>&1 </dev/null &
  echo "started: gpu $gpu for $secs s" ;;
hold)
  secs=${2:-600}
  info >/tmp/hj/host.txt
  setsid nohup $J idle --gpu 0 --seconds "$secs" --tag idle-new-gpu0 --out /tmp/hj \
    >/tmp/hj/idle.txt 2>&1 </dev/null &
  setsid nohup $J idle --exe carry/old/gpufill --gpu 1 --seconds "$secs" --tag idle-old-gpu1 \
    --out /tmp/hj >/tmp/hj/idle-old.txt 2>&1 </dev/null &
  echo "started: the new build on GPU 0, 052ca04 on GPU 1, for $secs s" ;;
beside)
  gpu=${2:-1}
  info
  old_alone "$gpu"
  timeout 90 $J holder --gpu "$gpu" --seconds 60 --grace 5 --tag "holder-gpu$gpu" --out "$out"
  timeout 320 $J bursting --gpu "$gpu" --every 120 --bursts 2 --tag "bursting-gpu$gpu" --out "$out"
  live_service "$gpu"
  timeout 60 python3 scripts/lab.py live --out "$out" --gpu "$gpu" --parts yield \
    --yield-runs 1 2>&1 | tail -2
  # A PyTorch job outside the namespace from 10 s: seen by device memory.
  ( sleep 10; CUDA_VISIBLE_DEVICES=$(nvidia-smi -i "$gpu" --query-gpu=uuid --format=csv,noheader) \
      timeout 15 python3 -c 'import torch,time; a=torch.randn(4096,4096,device="cuda")
t=time.time()
while time.time()-t<10: a@a
torch.cuda.synchronize()' ) &
  NO_COLOR=1 timeout 40 unshare --pid --fork --mount-proc carry/gpufill run --gpus "$gpu" \
    --duration 30 >"$out/ns-gpu$gpu.log" 2>&1
  wait
  echo "namespace: $(grep -c 'does not list' "$out/ns-gpu$gpu.log") yields to an unlisted process," \
    "$(grep -c 'paused' "$out/ns-gpu$gpu.log") pauses, filling lines $(grep -c ' filling' "$out/ns-gpu$gpu.log")"
  pack ;;
extra)
  # The final build's other checks on the second GPU while `start` holds the first:
  # 052ca04 alone (does this host stall?), a dormant holder, gpufill bench (pauses per
  # target, the newcomer yield), the live service, and issue 33's MPS follow.
  gpu=${2:-1}
  info
  old_alone "$gpu"
  timeout 90 $J holder --gpu "$gpu" --seconds 45 --grace 5 --tag "holder-gpu$gpu" --out "$out"
  timeout 150 carry/gpufill bench --gpu "$gpu" --out "$out/bench" >"$out/bench.txt" 2>&1
  echo "bench exit $?"; grep -v "^$" "$out/bench.txt" | tail -12
  live_service "$gpu"
  OUT=$out/mps MPS_CHECK_GPU=$gpu timeout 240 bash scripts/mps_follow_check.sh carry/gpufill 2>&1 | tail -16
  pack ;;
collect)
  while pgrep -f "lab.py jitter idle" >/dev/null; do sleep 2; done
  cat /tmp/hj/host.txt /tmp/hj/idle*.txt
  cp /tmp/hj/*.log /tmp/hj/*.json /tmp/hj/*.txt "$out"/ 2>/dev/null
  pack; ls -la "$out" ;;
*)
  echo "usage: $0 start [GPU] [SECS] | hold [SECS] | beside [GPU] | extra [GPU] | collect" >&2; exit 2 ;;
esac
