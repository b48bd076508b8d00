#!/usr/bin/env bash
# Issue 33, item 1, on a real GPU: MPS started and stopped under a running gpufill, with a
# job arriving each way. gpufill (yield.mps = "auto", the default) must become an MPS
# client within a few seconds of a control daemon starting, keep filling beside a PyTorch
# job that is a client too, and after the daemon stops fall back to its yield policy:
# nothing of ours runs beside a job that is not a client.
#
#   1. gpufill run --gpus 0 --metrics 127.0.0.1:PORT -v, no daemon: gpufill_mps none, filling;
#   2. nvidia-cuda-mps-control -d (pipe and log directories under /tmp): how long until
#      gpufill_mps{state="client"} is 1 and it fills again; the same PID (it executes
#      itself again); `gpufill status --json` lists it as an MPS client;
#   3. a PyTorch matmul job, an MPS client: gpufill keeps filling (no yield, duty > 0);
#   4. echo quit | nvidia-cuda-mps-control: how long until gpufill_mps{state="none"}; what
#      the pipe directory holds then (the endpoint is expected to stay, the PID file to
#      go); whether quit waited for gpufill, a client (then quit -t 3, then the daemon's
#      PID, each reported);
#   5. the same job, not a client: from its first listing on, gpufill yields (duty 0,
#      state yielding) every sample, and resumes after it.
# Prints a table at the end; raw samples, logs and listings go under $OUT (or
# /tmp/mps-follow-out). Needs root, one idle GPU 0, PyTorch; changes no compute mode,
# clock or MIG setting. About 2 minutes; every wait is bounded.
# Usage, from the repository root: bash scripts/mps_follow_check.sh [carry/gpufill]
set -u
NAME=follow PORT=19433 STOP_CMD=quit STOP_TIMEOUT=5
job=""
cleanup_extra() { [ -n "$job" ] && kill "$job" 2>/dev/null; }
# shellcheck source=scripts/mps_check_lib.sh
. "$(dirname "$0")/mps_check_lib.sh"

cat >"$work/job.py" <<'EOF'
import sys, time, torch
secs = float(sys.argv[1])
a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("ready %.3f" % time.time(), flush=True)
t, n = time.time(), 0
while time.time() - t < secs:
    a @ a; torch.cuda.synchronize(); n += 1
print("done %.3f %d it" % (time.time(), n), flush=True)
EOF

# --- preflight ------------------------------------------------------------------------
[ -x "$g" ] || { echo "no gpufill binary at $g"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (the daemon's pipe directory, and its servers)"; exit 2; }
nvidia-smi -i "$gpus" --query-gpu=name,driver_version,compute_mode,mig.mode.current --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi -i "$gpus" --query-compute-apps=pid,process_name --format=csv,noheader >"$out/before-apps.txt"
[ -s "$out/before-apps.txt" ] && say "WARNING: compute processes already on the GPU: $(tr '\n' ' ' <"$out/before-apps.txt")"
"$g" --version | head -1 | tee "$out/version.txt"

# --- 1: gpufill without MPS -------------------------------------------------------------
"$g" -v run --gpus "$gpus" --metrics 127.0.0.1:$PORT >"$out/gpufill.log" 2>&1 &
gp=$!
say "gpufill started, pid $gp"
took=$(wait_for 40 's["up"] and s.get("mps") == "none" and s.get("state") == "filling" and (s.get("util") or 0) > 20')
result "1 no daemon: mps none, filling" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s"
sleep 3
s=$(sample)
result "1 no daemon: utilization, duty" info "util $(field "$s" util) %, duty $(field "$s" duty)"

# --- 2: a daemon starts ----------------------------------------------------------------
say "starting nvidia-cuda-mps-control -d"
nvidia-cuda-mps-control -d
for _ in $(seq 20); do [ -s "$work/pipe/nvidia-cuda-mps-control.pid" ] && break; sleep 0.1; done
daemon_pid=$(cat "$work/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)
ls -la "$work/pipe" >"$out/pipe-daemon-up.txt" 2>&1
say "daemon pid ${daemon_pid:-unknown}; pipe directory: $(ls "$work/pipe" | tr '\n' ' ')"
took=$(wait_for 30 's["up"] and s.get("mps") == "client"')
result "2 daemon up: gpufill_mps client" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s (expected a few)"
took=$(wait_for 20 's["up"] and s.get("mps") == "client" and s.get("state") == "filling" and (s.get("duty") or 0) > 0')
result "2 daemon up: filling again as a client" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s more"
same=$(kill -0 "$gp" 2>/dev/null && echo "pid $gp alive" || echo "pid $gp gone")
result "2 daemon up: same PID (executed itself again)" "$(kill -0 "$gp" 2>/dev/null && echo ok || echo FAIL)" "$same; $(grep -c 'restarting to become its client' "$out/gpufill.log") restart line(s)"
"$g" status --json >"$out/status-client.json" 2>"$out/status-client.err"
client=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
ours = [p for g in s["gpus"] for p in g["processes"] if p["pid"] == int(sys.argv[2])]
print("daemon %s; gpufill listed %s, mps_client %s" % (s["mps"]["daemon"], bool(ours), [p["mps_client"] for p in ours]))
' "$out/status-client.json" "$gp" 2>&1)
result "2 status --json: gpufill an MPS client" "$(echo "$client" | grep -q 'daemon running; gpufill listed True, mps_client \[True' && echo ok || echo FAIL)" "$client"

# --- 3: a client job under MPS -----------------------------------------------------------
before=$(sample)
python3 "$work/job.py" 8 >"$out/job-client.txt" 2>&1 &
job=$!
samples=()
for _ in $(seq 36); do kill -0 "$job" 2>/dev/null || break; samples+=("$(sample)"); sleep 0.25; done
"$g" status --json >"$out/status-job-client.json" 2>/dev/null
wait "$job"; job=""
after=$(sample)
summary=$(printf '%s\n' "${samples[@]}" | python3 -c '
import json, sys
xs = [json.loads(l) for l in sys.stdin if l.strip()]
xs = [x for x in xs if x.get("up")]
# Under MPS the controller fills only the gap the job leaves: a job that saturates the
# GPU takes the duty to 0 while gpufill stays in state filling (it never yields).
filling = sum(1 for x in xs if x.get("state") == "filling")
duty = sum(1 for x in xs if (x.get("duty") or 0) > 0)
utils = [x["util"] for x in xs if x.get("util") is not None]
print("%d/%d samples filling (%d with duty > 0); util %s-%s %%" % (filling, len(xs), duty, min(utils, default="-"), max(utils, default="-")))
')
yields=$(python3 -c 'import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(int((b.get("yields") or 0)-(a.get("yields") or 0)))' "$before" "$after")
jobclient=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(sorted((p["name"], p["mps_client"]) for g in s["gpus"] for p in g["processes"]))' "$out/status-job-client.json" 2>&1)
ok3=$(echo "$summary" | python3 -c 'import sys; a,b=sys.stdin.read().split()[0].split("/"); print("ok" if int(b) and int(a) == int(b) else "FAIL")')
result "3 client job: gpufill keeps filling" "$([ "$ok3" = ok ] && [ "$yields" = 0 ] && echo ok || echo FAIL)" "$summary; yields +$yields; $(tail -1 "$out/job-client.txt")"
result "3 client job: processes (name, mps_client)" info "$jobclient"

# --- 4: the daemon stops -----------------------------------------------------------------
say "echo quit | nvidia-cuda-mps-control"
echo quit | timeout 10 nvidia-cuda-mps-control
quit_rc=$?
took=$(wait_for 20 's["up"] and s.get("mps") == "none"')
ls -la "$work/pipe" >"$out/pipe-after-quit.txt" 2>&1
alive=$([ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null && echo "daemon still alive" || echo "daemon gone")
result "4 quit: gpufill_mps none" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s; quit rc $quit_rc; $alive; pipe: $(ls "$work/pipe" 2>/dev/null | tr '\n' ' ')"
if [ "$took" = timeout ]; then
  say "gpufill still a client 20 s after quit: trying quit -t 3"
  echo "quit -t 3" | timeout 10 nvidia-cuda-mps-control
  took=$(wait_for 20 's["up"] and s.get("mps") == "none"')
  result "4 quit -t 3: gpufill_mps none" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s"
  if [ "$took" = timeout ] && [ -n "$daemon_pid" ]; then
    say "killing the daemon (pid $daemon_pid) and its servers"
    for child in $(pgrep -P "$daemon_pid" 2>/dev/null); do kill "$child" 2>/dev/null; done
    kill "$daemon_pid" 2>/dev/null
    took=$(wait_for 20 's["up"] and s.get("mps") == "none"')
    result "4 daemon killed: gpufill_mps none" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s"
  fi
fi
took=$(wait_for 20 's["up"] and s.get("mps") == "none" and s.get("state") == "filling"')
result "4 after quit: filling without MPS" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s more; $(grep -c 'restarting without MPS' "$out/gpufill.log") restart line(s)"

# --- 5: a job that is not a client -------------------------------------------------------
before=$(sample)
CUDA_MPS_PIPE_DIRECTORY=$work/no-daemon python3 "$work/job.py" 8 >"$out/job-plain.txt" 2>&1 &
job=$!
: >"$out/samples-plain.jsonl"
for _ in $(seq 60); do
  kill -0 "$job" 2>/dev/null || break
  $lab sample "$url" >>"$out/samples-plain.jsonl"
  sleep 0.1
done
wait "$job"; job=""
verdict=$(python3 - "$out/samples-plain.jsonl" "$out/job-plain.txt" <<'EOF'
import json, sys
xs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ready = next((float(l.split()[1]) for l in open(sys.argv[2]) if l.startswith("ready")), None)
if ready is None:
    print("FAIL the job never got ready"); sys.exit()
# From the job's first kernel on (its context is up and listed by then).
during = [x for x in xs if x.get("up") and x["t"] >= ready]
ours = [x for x in during if x.get("state") != "yielding" or (x.get("duty") or 0) > 0]
verdict = "ok" if during and not ours else "FAIL"
print("%s %d samples after the job's first kernel, %d not yielding or with duty > 0" % (verdict, len(during), len(ours)))
EOF
)
result "5 plain job: nothing of ours beside it" "${verdict%% *}" "${verdict#* }; $(tail -1 "$out/job-plain.txt")"
after=$(sample)
result "5 plain job: yields" info "+$(python3 -c 'import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(int((b.get("yields") or 0)-(a.get("yields") or 0)))' "$before" "$after")"
took=$(wait_for 30 's["up"] and s.get("state") == "filling"')
result "5 after the job: filling again" "$([ "$took" != timeout ] && echo ok || echo FAIL)" "after ${took} s (grace_s 5 s)"

# --- table -------------------------------------------------------------------------------
echo
printf '%-44s %-5s %s\n' check result detail | tee "$out/table.txt"
printf '%s\n' "${results[@]}" | tee -a "$out/table.txt"
grep -E "MPS control daemon|restarting|yielding|filling|context ready|ERROR|WARN" "$out/gpufill.log" | head -40 >"$out/gpufill-lines.txt"
echo "details under $out"
