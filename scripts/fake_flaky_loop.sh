#!/usr/bin/env bash
# Issue 31 item 4: runs the hardware test that was flaky on the stand-in libcuda N times
# in a row beside 2 CPU hogs, here (no GPU). Prints the failures and "fails F / N".
#   bash scripts/fake_flaky_loop.sh [N]
set -u
cd "$(dirname "$0")/.."
n=${1:-200}
fake=$(mktemp -d)
cc -shared -fPIC -O2 -o "$fake/libcuda.so" gpufill-cuda/tests/fake-libcuda/fake.c -lpthread
bin=$(cargo test --release -p gpufill-cuda --test hardware --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="hardware": print(m["executable"])')
export LD_LIBRARY_PATH=$fake FAKE_FOREIGN=$fake/foreign
yes >/dev/null & h1=$!
yes >/dev/null & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
fails=0
for _ in $(seq "$n"); do
  "$bin" --ignored --exact bursts_of_one_kernel_show_another_contexts_work_and_nothing_without_it \
    --nocapture >"$fake/run.log" 2>&1 || {
    fails=$((fails + 1)); grep -m1 "hw:" "$fake/run.log"; grep -m1 -A1 panicked "$fake/run.log"; }
done
echo "fails $fails / $n"
