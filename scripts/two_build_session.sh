#!/usr/bin/env bash
# One host of four GPUs (nvidia-h200-x4), two device calls: the 10-minute hold with nobody
# else at the literal defaults, this build against an older one on the same host at the
# same time, and issue 40's fill-gaps pairs beside them. Build here first
# (scripts/build-carry.sh), put the older build at carry/old/gpufill; carry `carry`.
#   bash scripts/two_build_session.sh start    # GPU 0: carry/gpufill, GPU 1: carry/old/gpufill,
#        each alone for 600 s, detached (lab.py jitter idle: pauses, mean utilization);
#        GPU 2: lab.py gaps train-input,sub-ms (5 pairs); GPU 3: lab.py gaps decode (5
#        pairs), then, with MPS_QUIT=1, scripts/mps_quit_check.sh on GPU 3
#   bash scripts/two_build_session.sh collect  # GPU 2: lab.py gaps train-full,arrive
#        (EXTRA_WORKLOADS); waits for the two holds, prints them and packs everything into $OUT
#   bash scripts/two_build_session.sh checks   # a third call, every GPU idle: gpufill bench of
#        both builds interleaved, lab.py cpu-states old against new, the hardware tests
#        (scripts/build-carry.sh builds carry/hw-cuda and carry/hw-nvml)
# Where no host of four is lent, a host of two in two calls of under 10 minutes each:
#   bash scripts/two_build_session.sh holds    # both builds alone for 600 s, GPU 0 and 1, detached
#   bash scripts/two_build_session.sh gaps2    # then the fill-gaps pairs and the MPS quit check
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
mkdir -p /tmp/hj

# The host, its GPUs and the two builds, into /tmp/hj/host.txt.
host_info() {
  { date -u +%FT%TZ
    nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_mode --format=csv,noheader
    echo "new: $(carry/gpufill --version)"; echo "old: $(carry/old/gpufill --version)"; } |
    tee /tmp/hj/host.txt
}

# Each build alone at the literal defaults for 600 s, detached: new on GPU 0, old on GPU 1.
start_holds() {
  setsid nohup python3 scripts/lab.py jitter idle --exe carry/gpufill --gpu 0 --seconds 600 \
    --tag idle-new-gpu0 --out /tmp/hj >/tmp/hj/idle-new.txt 2>&1 </dev/null &
  setsid nohup python3 scripts/lab.py jitter idle --exe carry/old/gpufill --gpu 1 --seconds 600 \
    --tag idle-old-gpu1 --out /tmp/hj >/tmp/hj/idle-old.txt 2>&1 </dev/null &
}

# Waits for the two holds to end, prints them and packs /tmp/hj into $OUT/hold.tgz.
end_holds() {
  while pgrep -f "lab.py jitter idle" >/dev/null; do sleep 2; done
  cat /tmp/hj/host.txt; echo "== new"; tail -4 /tmp/hj/idle-new.txt
  echo "== old"; tail -4 /tmp/hj/idle-old.txt
  [ -n "${OUT:-}" ] && tar czf "$OUT/hold.tgz" -C /tmp hj && echo "packed: $OUT/hold.tgz"
}

# scripts/mps_quit_check.sh on NVML GPU $1, into /tmp/hj/mps.
mps_quit() {
  mkdir -p /tmp/hj/mps
  OUT=/tmp/hj/mps MPS_CHECK_GPU=$1 timeout 150 bash scripts/mps_quit_check.sh carry/gpufill \
    >/tmp/hj/mps/run.txt 2>&1
}

case "${1:-}" in
start)
  host_info
  start_holds
  ( GAPS_TIMEOUT=230 bash scripts/gaps_session.sh 3 decode --pairs 5 --budget 180 >/tmp/hj/gaps3.txt 2>&1
    [ "${MPS_QUIT:-0}" = 1 ] && mps_quit 3 ) &
  GAPS_TIMEOUT=420 bash scripts/gaps_session.sh 2 train-input,sub-ms --pairs 5 --budget 340 2>&1 |
    grep -A5 "^workload "
  wait $!
  echo "==== GPU 3: decode"; grep -A4 "^workload " /tmp/hj/gaps3.txt
  [ -f /tmp/hj/mps/run.txt ] && { echo "==== GPU 3: MPS quit"; tail -25 /tmp/hj/mps/run.txt; }
  exit 0 ;;
collect)
  if [ -n "${EXTRA_WORKLOADS:-train-full,arrive}" ]; then
    GAPS_TIMEOUT=${EXTRA_TIMEOUT:-230} bash scripts/gaps_session.sh 2 "${EXTRA_WORKLOADS:-train-full,arrive}" \
      --pairs 5 --budget "${EXTRA_BUDGET:-180}" >/tmp/hj/gaps2x.txt 2>&1
    echo "==== GPU 2: extra"; grep -A4 "^workload " /tmp/hj/gaps2x.txt
  fi
  end_holds ;;
holds)
  # A host of two GPUs (nvidia-h200-x2), one call: the two holds alone, side by side.
  host_info
  start_holds
  sleep "${HOLD_SLEEP:-560}"; echo "holds still running: $(pgrep -fc 'lab.py jitter idle')" ;;
gaps2)
  # The same host, a second call: the end of the holds; then the fill-gaps pairs on GPU 0,
  # decode and the MPS quit check on GPU 1.
  end_holds
  ( GAPS_TIMEOUT=200 bash scripts/gaps_session.sh 1 decode --pairs 5 --budget 160 >/tmp/hj/gaps1.txt 2>&1
    mps_quit 1
    [ -n "${OUT:-}" ] && tar czf "$OUT/mps.tgz" -C /tmp/hj mps ) &
  GAPS_TIMEOUT=380 bash scripts/gaps_session.sh 0 train-input,sub-ms --pairs 5 --budget 300 2>&1 |
    grep -A5 "^workload "
  wait
  echo "==== GPU 1: decode"; grep -A4 "^workload " /tmp/hj/gaps1.txt
  echo "==== GPU 1: MPS quit"; tail -25 /tmp/hj/mps/run.txt ;;
checks)
  # Every GPU idle (after the holds; a host of four GPUs): `gpufill bench` of both builds
  # interleaved (GPU 1: old, then new; GPU 2: new, then old), lab.py cpu-states old
  # against new on GPU 0, and the hardware tests on GPU 3. About 4 minutes.
  u3=$(nvidia-smi -i 3 --query-gpu=uuid --format=csv,noheader)
  mkdir -p /tmp/hj/bench
  for g in 1 2; do
    ( order="old new"; [ "$g" = 2 ] && order="new old"
      for b in $order; do
        exe=carry/gpufill; [ "$b" = old ] && exe=carry/old/gpufill
        timeout 120 "$exe" -q bench --gpu "$g" --seconds 8 --out "/tmp/hj/bench/$b-gpu$g" \
          >"/tmp/hj/bench/$b-gpu$g.txt" 2>&1
        echo "exit $?" >>"/tmp/hj/bench/$b-gpu$g.txt"
      done ) &
  done
  ( export CUDA_VISIBLE_DEVICES=$u3 GPUFILL_TEST_GPU=$u3
    timeout 150 carry/hw-cuda --ignored --test-threads 1 2>&1 | grep -E "^hw:|test result|panicked|FAILED"
    timeout 100 carry/hw-nvml --ignored --test-threads 1 --skip gpm 2>&1 |
      grep -E "test result|panicked|FAILED" ) >/tmp/hj/hw.txt 2>&1 &
  timeout 260 python3 scripts/lab.py cpu-states --exe old=carry/old/gpufill --exe new=carry/gpufill \
    --repeats 2 --hold 5 --grace 2 --no-trace --out /tmp/hj/cpu 2>&1 | tail -14
  wait
  for f in /tmp/hj/bench/*.txt; do echo "== $f"; tail -12 "$f"; done
  echo "== hardware tests (GPU 3)"; cat /tmp/hj/hw.txt
  [ -n "${OUT:-}" ] && tar czf "$OUT/checks.tgz" -C /tmp hj && echo "packed: $OUT/checks.tgz" ;;
*)
  echo "usage: $0 start | collect | checks | holds | gaps2" >&2; exit 2 ;;
esac
