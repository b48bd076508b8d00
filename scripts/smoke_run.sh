#!/usr/bin/env bash
# A quick end-to-end check of `gpufill run` on a real GPU: 6 s at 50 % with the metrics
# endpoint, one scrape, a SIGTERM, and a short bench. Usage: bash scripts/smoke_run.sh carry/gpufill
set -u
g=${1:-carry/gpufill}
out=${OUT:-/tmp/smoke}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
NO_COLOR=1 RUST_LOG=gpufill=info "$g" run --gpus 0 --target 50 --metrics 127.0.0.1:9411 2>"$out/run.log" &
pid=$!
sleep 5
curl -s 127.0.0.1:9411/metrics >"$out/scrape.txt"
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
kill -TERM $pid; wait $pid; echo "run exit: $?"
grep -E "context ready|filling|idle|stopped|error|warn" "$out/run.log" | head
grep -E "^gpufill_(state|duty|utilization|memory|target)" "$out/scrape.txt" | head -12
"$g" bench --targets 50 --seconds 6 --out "$out/bench" 2>/dev/null | tail -8
