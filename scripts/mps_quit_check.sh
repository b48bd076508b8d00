#!/usr/bin/env bash
# Issue 39, item 1, on a real GPU: gpufill as an MPS client must let a plain
# `echo quit | nvidia-cuda-mps-control` complete within 10 s, keep running (without MPS:
# gpufill_mps left), follow a daemon started again, and recover within 10 s from a
# kill -9 of nvidia-cuda-mps-server without a restart loop.
#
#   1. nvidia-cuda-mps-control -d (pipe and log directories under /tmp), then
#      gpufill run --gpus 0 --metrics 127.0.0.1:PORT -v: wait for gpufill_mps client;
#   2. time `echo quit | timeout 30 nvidia-cuda-mps-control`; gpufill alive, same PID,
#      gpufill_mps, its log lines, control.log (what the daemon shows of a pending quit);
#      `get_server_list` is asked while the quit is pending, in the background (it may
#      not answer: bounded);
#   3. nvidia-cuda-mps-control -d again: time until gpufill_mps client;
#   4. kill -9 of the nvidia-cuda-mps-server: time until gpufill_mps client and filling
#      again, the new server's PID, gpufill's restarts in the next 30 s (a loop shows here);
#   5. the server killed a second time within 60 s: gpufill is expected to leave the daemon
#      (gpufill_mps left) and keep filling without MPS.
# Prints a table at the end; samples, logs, control.log and listings go under $OUT (or
# /tmp/mps-quit-out). Needs root, one idle GPU 0, python3 (the lab's sampler); changes no
# compute mode, clock or MIG setting. About 3 minutes; every wait is bounded.
# Usage, from the repository root: bash scripts/mps_quit_check.sh [carry/gpufill]
set -u
NAME=quit PORT=19434
# shellcheck source=scripts/mps_check_lib.sh
. "$(dirname "$0")/mps_check_lib.sh"

daemon_up() {
  nvidia-cuda-mps-control -d
  for _ in $(seq 30); do [ -s "$work/pipe/nvidia-cuda-mps-control.pid" ] && break; sleep 0.1; done
  daemon_pid=$(cat "$work/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
  say "daemon pid ${daemon_pid:-unknown}"
}
servers() { [ -n "$daemon_pid" ] && pgrep -P "$daemon_pid" -x nvidia-cuda-mps 2>/dev/null | tr '\n' ' '; }
alive() { kill -0 "$gp" 2>/dev/null && echo "pid $gp alive" || echo "pid $gp GONE"; }
lines() { grep -c "$1" "$out/gpufill.log" 2>/dev/null || true; }

# --- preflight ------------------------------------------------------------------------
[ -x "$g" ] || { echo "no gpufill binary at $g"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (the daemon's pipe directory, and its servers)"; exit 2; }
nvidia-smi -i "$gpus" --query-gpu=name,driver_version,compute_mode,mig.mode.current --format=csv,noheader | tee "$out/gpu.txt"
"$g" --version | head -1 | tee "$out/version.txt"

# --- 1: gpufill a client ------------------------------------------------------------------
daemon_up
"$g" -v run --gpus "$gpus" --metrics 127.0.0.1:$PORT >"$out/gpufill.log" 2>&1 &
gp=$!
say "gpufill started, pid $gp"
took=$(wait_for 40 's["up"] and s.get("mps") == "client" and s.get("state") == "filling"')
result "1 gpufill an MPS client, filling" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s; servers: $(servers)"

# --- 2: plain quit --------------------------------------------------------------------------
cp "$work/log/control.log" "$out/control-before-quit.log" 2>/dev/null
say "echo quit | nvidia-cuda-mps-control"
t0=$(now)
( echo quit | timeout 30 nvidia-cuda-mps-control >"$out/quit.out" 2>&1; echo "rc $? after $(since "$t0") s" >"$out/quit.rc" ) &
quitter=$!
# What the daemon shows while the quit is pending (bounded: it may not answer).
sleep 0.3
( echo get_server_list | timeout 3 nvidia-cuda-mps-control >"$out/server-list-during-quit.txt" 2>&1; echo "rc $?" >>"$out/server-list-during-quit.txt" ) &
cp "$work/log/control.log" "$out/control-during-quit.log" 2>/dev/null
wait "$quitter"
quit=$(cat "$out/quit.rc")
secs=$(echo "$quit" | awk '{print $4}')
ok=$(python3 -c 'import sys; print("ok" if sys.argv[1] and float(sys.argv[1]) <= 10 else "FAIL")' "${secs:-99}" 2>/dev/null)
result "2 quit completes within 10 s" "$ok" "$quit; daemon $(kill -0 "$daemon_pid" 2>/dev/null && echo alive || echo gone)"
s=$(sample)
result "2 gpufill still running, gpufill_mps" "$(kill -0 "$gp" 2>/dev/null && [ "$(field "$s" mps)" = left ] && echo ok || echo FAIL)" "$(alive); mps $(field "$s" mps); state $(field "$s" state)"
took=$(wait_for 20 's["up"] and s.get("mps") == "left" and s.get("state") == "filling"')
result "2 filling without MPS" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s more; quit lines: $(lines 'told to quit')"
grep -n "Cmd:\|NEW UI\|UI closed\|quit\|Quit\|exit\|Exit" "$work/log/control.log" >"$out/control-quit-lines.txt" 2>/dev/null
result "2 control.log around the quit" info "$(tail -5 "$out/control-quit-lines.txt" | tr '\n' '|')"

# --- 3: the daemon again ------------------------------------------------------------------
t0=$(now)
daemon_up
took=$(wait_for 30 's["up"] and s.get("mps") == "client" and s.get("state") == "filling"')
result "3 new daemon: client and filling again" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s; $(alive); servers: $(servers)"

# --- 4: kill -9 of the server ---------------------------------------------------------------
sleep 3
srv=$(servers | awk '{print $1}')
say "kill -9 of the MPS server ${srv:-none}"
restarts0=$(lines 'starting afresh')
if [ -n "$srv" ]; then
  kill -9 "$srv"
  took=$(wait_for 30 's["up"] and s.get("mps") == "client" and s.get("state") == "filling"')
  result "4 server killed: client and filling again" "$([ "$took" != timeout ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 10 else 1)' "$took" && echo ok || echo FAIL)" "after ${took} s; $(alive); new servers: $(servers); lost lines: $(lines 'MPS server is gone')"
  sleep 20
  result "4 no restart loop (restarts in 20 s after)" "$([ "$(( $(lines 'starting afresh') - restarts0 ))" -le 1 ] && echo ok || echo FAIL)" "$(( $(lines 'starting afresh') - restarts0 )) restart(s) since the kill"
  # --- 5: a second loss within 60 s: leave ----------------------------------------------------
  srv=$(servers | awk '{print $1}')
  say "second kill -9 of the MPS server ${srv:-none}"
  if [ -n "$srv" ]; then
    kill -9 "$srv"
    took=$(wait_for 30 's["up"] and s.get("mps") == "left" and s.get("state") == "filling"')
    result "5 second loss within 60 s: left, filling" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s; $(alive)"
  fi
else
  result "4 server killed" FAIL "no nvidia-cuda-mps-server child of the daemon $daemon_pid"
fi
grep -i "mps\|afresh\|worker" "$out/gpufill.log" >"$out/gpufill-mps-lines.txt"

echo
echo "=== mps_quit_check: $(cat "$out/version.txt") on $(cut -d, -f1 "$out/gpu.txt") ==="
printf '%s\n' "${results[@]}" | tee "$out/table.txt"
echo "gpufill's MPS log lines: $out/gpufill-mps-lines.txt; control.log: $out/mps-log/control.log"
