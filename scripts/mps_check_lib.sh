# Sourced by scripts/mps_follow_check.sh and scripts/mps_quit_check.sh: the harness both
# share. Before sourcing, set NAME (the /tmp work and out directories' suffix), PORT (the
# metrics port), and optionally STOP_CMD and STOP_TIMEOUT (how cleanup asks a daemon to
# quit; default "quit -t 3" within 10 s) and a cleanup_extra function (run first at exit).
# It sets g (the binary, $1 of the script), gpus, CUDA_VISIBLE_DEVICES (MPS_CHECK_GPU=N
# runs it all on NVML GPU N: the daemon, gpufill and the jobs see that GPU alone), out,
# work (pipe/ and log/ under it, the MPS directories, exported), url, gp, daemon_pid,
# results, lab; defines say, result, now, since, stop_daemon, cleanup (trapped at exit),
# sample, field and wait_for.
g=${1:-carry/gpufill}
gpus=${MPS_CHECK_GPU:-0}
if [ -n "${MPS_CHECK_GPU:-}" ]; then
  CUDA_VISIBLE_DEVICES=$(nvidia-smi -i "$MPS_CHECK_GPU" --query-gpu=uuid --format=csv,noheader)
  export CUDA_VISIBLE_DEVICES
fi
out=${OUT:-/tmp/mps-$NAME-out}
mkdir -p "$out"
work=/tmp/gpufill-mps-$NAME
rm -rf "$work"
mkdir -p "$work/pipe" "$work/log"
chmod 755 "$work" "$work/pipe" "$work/log"
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
export NO_COLOR=1
url=http://127.0.0.1:$PORT
gp=""
daemon_pid=""
results=()

say() { echo "$(date +%T.%3N) $*" | tee -a "$out/marks.txt"; }
result() { # CHECK VERDICT DETAIL
  results+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")")
  say "$1: $2 $3"
}
now() { date +%s.%N; }
since() { python3 -c 'import sys,time; print("%.2f" % (time.time() - float(sys.argv[1])))' "$1"; }

stop_daemon() {
  [ -e "$work/pipe/control" ] || return 0
  echo "${STOP_CMD:-quit -t 3}" | timeout "${STOP_TIMEOUT:-10}" nvidia-cuda-mps-control >/dev/null 2>&1 || true
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    for child in $(pgrep -P "$daemon_pid" 2>/dev/null); do kill "$child" 2>/dev/null; done
    kill "$daemon_pid" 2>/dev/null
  fi
}
cleanup() {
  declare -F cleanup_extra >/dev/null && cleanup_extra
  if [ -n "$gp" ] && kill -0 "$gp" 2>/dev/null; then
    kill -TERM "$gp" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$gp" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$gp" 2>/dev/null
  fi
  stop_daemon
  cp -r "$work/log" "$out/mps-log" 2>/dev/null
  ls -la "$work/pipe" >"$out/pipe-at-exit.txt" 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One sample of the metrics as JSON: mps state, gpufill's state on GPU 0, duty, util,
# yields, foreign, worker_up ({"up": false} when the endpoint does not answer).
lab="python3 $(dirname "${BASH_SOURCE[0]}")/lab.py"
sample() { $lab sample "$url" | tee -a "$out/samples.jsonl"; }
field() { python3 -c 'import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"; }
# wait_for SECONDS PYTHON-CONDITION-ON-s: samples every 0.25 s; prints the seconds taken
# or "timeout".
wait_for() {
  local deadline=$((SECONDS + $1)) t0 s
  t0=$(now)
  while [ $SECONDS -lt $deadline ]; do
    s=$(sample)
    if python3 -c "import json,sys; s=json.loads(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$s" 2>/dev/null; then
      since "$t0"; return 0
    fi
    sleep 0.25
  done
  echo timeout; return 1
}
