#!/usr/bin/env bash
# Builds the release binary and the hardware test binaries into carry/ (ignored by git),
# to be carried to the GPU machine: the device tool's `carry: ["carry"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p gpufill-cli
rm -rf carry && mkdir -p carry
cp target/release/gpufill carry/
for crate in gpufill-cuda gpufill-nvml; do
  bin=$(cargo test --release -p "$crate" --test hardware --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="hardware": print(m["executable"])')
  cp "$bin" "carry/hw-${crate#gpufill-}"
done
strip carry/* 2>/dev/null || true
ls -la carry
