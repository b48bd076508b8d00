#!/usr/bin/env bash
# CPU of `gpufill run` at the defaults in the host's PID view and inside a PID namespace
# of its own (where it also reads device memory every tick), interleaved, on an idle GPU 0.
# Prints user+system CPU seconds over the run as a percent of one core.
# Usage: bash scripts/namespace_cpu.sh carry/gpufill [SECONDS] [PAIRS]
set -u
g=${1:-carry/gpufill}; secs=${2:-30}; pairs=${3:-2}
run() { # view
  local start end
  if [ "$1" = namespace ]; then
    /usr/bin/time -f "%U %S" -o /tmp/cpu.$$ unshare --pid --fork --mount-proc "$g" run --gpus 0 --duration "$secs" 2>/dev/null
  else
    /usr/bin/time -f "%U %S" -o /tmp/cpu.$$ "$g" run --gpus 0 --duration "$secs" 2>/dev/null
  fi
  read -r u s </tmp/cpu.$$
  python3 -c "print(f'$1 {100*($u+$s)/$secs:.2f} % of a core (user {$u} s, system {$s} s over $secs s)')"
}
for _ in $(seq "$pairs"); do run host; run namespace; done
