#!/usr/bin/env bash
# Issue 15, item 1, on a real GPU: whom gpufill trusts as MPS, and whom it yields to
# under MPS. Needs root (a daemon's pipe directory under /tmp), torch, an idle GPU 0.
#   1. a plain file at /tmp/nvidia-mps/control (what any local user can create): gpufill
#      must not take it for a daemon, and must yield to a PyTorch job as without MPS;
#   2. a real MPS control daemon, gpufill its client: a PyTorch job that is a client too
#      runs beside it (no yield); one started without the pipe directory (not a client,
#      it time-slices) is yielded to.
# Usage: bash scripts/mps_trust_check.sh carry/gpufill
set -u
g=${1:-carry/gpufill}
out=${OUT:-/tmp/mps-trust}; mkdir -p "$out"
export NO_COLOR=1 RUST_LOG=gpufill=info
job='import time, torch; a = torch.randn(4096, 4096, device="cuda"); t = time.time()
while time.time() - t < 4: a @ a; torch.cuda.synchronize()'
verdict() { # log label
  if grep -q "yielding" "$1"; then echo "$2: yielded"; else echo "$2: did not yield"; fi
  grep -c "MPS control daemon found" "$1" | sed "s/^/$2: 'MPS control daemon found' lines: /"
}

echo "== 1: a fake control file"
rm -rf /tmp/nvidia-mps; mkdir -p /tmp/nvidia-mps; touch /tmp/nvidia-mps/control
"$g" run --gpus 0 --duration 20 2>"$out/fake.log" & gp=$!
sleep 2; python3 -c "$job"; echo "fake: job done at $(date +%T.%N)" >>"$out/marks"; wait $gp
verdict "$out/fake.log" "fake file"
rm -rf /tmp/nvidia-mps

echo "== 2: a real MPS daemon"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && sleep 1
ls -la $CUDA_MPS_PIPE_DIRECTORY | tee -a "$out/marks"
"$g" run --gpus 0 --duration 30 2>"$out/mps.log" & gp=$!
sleep 3
python3 -c "$job"                                     # a client
echo "client job done at $(date +%T.%N)" >>"$out/marks"
echo "non-client job starts at $(date +%T.%N)" >>"$out/marks"
env -u CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_PIPE_DIRECTORY=/tmp/no-mps-here python3 -c "$job"   # not a client
echo "non-client job done at $(date +%T.%N)" >>"$out/marks"
wait $gp
echo quit | nvidia-cuda-mps-control
grep -E "MPS control daemon found|yielding|filling" "$out/mps.log" | head -8
verdict "$out/mps.log" "under MPS"
nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | head -3
