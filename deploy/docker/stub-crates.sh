#!/bin/sh
# Empty sources for every target the workspace's manifests declare, so that the
# Dockerfile's dependency layer can `cargo build` the dependencies before the sources
# are copied in: that layer is rebuilt only when a Cargo.toml or Cargo.lock changes.
# deploy/check.sh runs this beside the manifests and checks that cargo accepts the
# result, and that every file it writes exists in the repository (COPY . . then
# replaces each one; none is left behind as a target of its own).
set -eu
for crate in gpufill-core gpufill-cuda gpufill-nvml gpufill-runtime gpufill-sim gpufill-cli benches; do
  mkdir -p "$crate/src"
  : >"$crate/src/lib.rs"
done
mkdir -p gpufill-runtime/examples benches/benches
for main in gpufill-cli/src/main.rs gpufill-runtime/examples/fill_gpu0.rs \
  benches/benches/loop_step.rs benches/benches/controller.rs; do
  echo 'fn main() {}' >"$main"
done
