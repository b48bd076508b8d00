#!/usr/bin/env bash
# The 10-minute hold with nobody else on the GPU, at the literal defaults, on a host of one
# GPU (nvidia-h200), in two device calls on the same warm machine. Build here first
# (scripts/build-carry.sh); carry `carry`.
#   bash scripts/hold_one_gpu.sh start [EXE]    # host, GPU, driver and build into /tmp/hj;
#        EXE (carry/gpufill) alone on GPU 0 for HOLD_SECONDS (600), detached (it outlives
#        the call); the call then sleeps HOLD_SLEEP (585) s
#   bash scripts/hold_one_gpu.sh collect [CMD]  # waits for the hold to end, prints its line
#        (mean utilization from 10 s, CPU, pauses), packs /tmp/hj into $OUT/hold.tgz; then
#        runs CMD (another measurement on the now idle GPU), if given
# The hold's line: scripts/gpulab/jitter.py (`idle`).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
mkdir -p /tmp/hj
case "${1:-}" in
start)
  exe=${2:-carry/gpufill}
  { date -u +%FT%TZ; hostname
    nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode --format=csv,noheader
    nvidia-smi compute-policy -l 2>/dev/null | head -5
    echo "build: $exe $($exe --version)"; } | tee /tmp/hj/host.txt
  setsid nohup python3 scripts/lab.py jitter idle --exe "$exe" --gpu 0 \
    --seconds "${HOLD_SECONDS:-600}" --tag idle --out /tmp/hj >/tmp/hj/idle.txt 2>&1 </dev/null &
  sleep "${HOLD_SLEEP:-585}"
  echo "hold still running: $(pgrep -fc 'lab.py jitter idle')" ;;
collect)
  while pgrep -f "lab.py jitter idle" >/dev/null; do sleep 1; done
  cat /tmp/hj/host.txt; tail -3 /tmp/hj/idle.txt
  [ -n "${OUT:-}" ] && tar czf "$OUT/hold.tgz" -C /tmp hj && echo "packed: $OUT/hold.tgz"
  if [ -n "${2:-}" ]; then echo "== $2"; bash -c "$2"; fi ;;
*)
  echo "usage: $0 start [EXE] | collect [CMD]" >&2; exit 2 ;;
esac
