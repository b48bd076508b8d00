#!/usr/bin/env python3
"""Offline checks of deploy/: Kubernetes manifests, the Helm chart, the Grafana dashboard.

Run by deploy/check.sh (which installs the validators); exits non-zero on any failure.

- Every object in deploy/kubernetes/*.yaml validates strictly (unknown fields rejected)
  against the Kubernetes JSON schemas bundled by the PyPI package kubernetes-validate,
  for the oldest and the newest Kubernetes version we claim. ServiceMonitor is a CRD
  that those schemas do not cover: it is checked against deploy/schemas/.
- The Helm chart is linted and rendered offline (PyPI helm-python-sdk, Helm's Go SDK)
  with several value sets, and every rendered object is validated the same way; the
  default render must equal the plain manifests except for Helm's own labels and the
  config checksum. Without helm-python-sdk only Chart.yaml and values.yaml are parsed.
- The ConfigMap's gpufill.toml passes `gpufill config check` (with --gpufill).
- The dashboard is valid JSON, its queries parse as PromQL (PyPI promql-parser) and
  use only metrics gpufill exports.
- A self-test breaks a copy of the DaemonSet and expects the validation to fail.
"""
import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
CHART = os.path.join(DEPLOY, "helm", "gpufill")
# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and the newest schemas.
VERSIONS = ["1.25.0", kubernetes_validate.utils.latest_version()]
LOCAL_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
}
# What gpufill exports: every series name in the renderer's source, so the dashboard
# check follows the code (docs/operations.md, "Metrics", lists them for people).
METRICS = set(re.findall(
    r'"(gpufill_[a-z_]+)"',
    (Path(__file__).resolve().parent.parent / "gpufill-cli/src/metrics/render.rs").read_text()))
# Labels Helm adds that the plain manifests leave out.
HELM_ONLY_LABELS = {"app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL {what}")


def name_of(obj):
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def load_yaml_docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def validate(obj, version):
    """Raises on an invalid object or one no schema covers."""
    local = LOCAL_SCHEMAS.get((obj.get("apiVersion"), obj.get("kind")))
    if local:
        with open(os.path.join(DEPLOY, "schemas", local)) as f:
            jsonschema.Draft202012Validator(json.load(f)).validate(obj)
        return
    kubernetes_validate.validate(obj, version, strict=True)


def check_objects(origin, objs):
    for obj in objs:
        for version in VERSIONS:
            try:
                validate(obj, version)
            except kubernetes_validate.utils.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                fail(f"{origin}: {name_of(obj)} against {version}: {path}: {e.message}")
            except jsonschema.ValidationError as e:
                path = ".".join(str(p) for p in e.absolute_path)
                fail(f"{origin}: {name_of(obj)}: {path}: {e.message}")
                break  # a local schema does not depend on the version
            except Exception as e:  # no schema, unreadable schema
                fail(f"{origin}: {name_of(obj)} against {version}: {e}")
    print(f"ok   {origin}: {len(objs)} object(s) valid against {', '.join(VERSIONS)}")


def plain_manifests():
    objs = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "*.yaml"))):
        with open(path) as f:
            docs = load_yaml_docs(f.read())
        check_objects(os.path.relpath(path, ROOT), docs)
        objs += docs
    return objs


def self_test(objs):
    """The validation must reject a broken DaemonSet, or it proves nothing."""
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    breakages = {
        "a port that is a string": lambda d: d["spec"]["template"]["spec"]["containers"][0]
        ["ports"][0].update(containerPort="metrics"),
        "an unknown field": lambda d: d["spec"]["template"]["spec"].update(hostPid=True),
        "no selector": lambda d: d["spec"].pop("selector"),
    }
    for what, breakage in breakages.items():
        broken = copy.deepcopy(ds)
        breakage(broken)
        try:
            validate(broken, VERSIONS[0])
        except Exception:
            continue
        fail(f"self-test: a DaemonSet with {what} passed validation")
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    broken = copy.deepcopy(sm)
    broken["spec"]["endpoints"][0]["intervall"] = "15s"
    try:
        validate(broken, VERSIONS[0])
        fail("self-test: a ServiceMonitor with an unknown field passed validation")
    except jsonschema.ValidationError:
        pass
    print("ok   self-test: broken objects are rejected")


def strip_helm(obj):
    obj = copy.deepcopy(obj)
    for meta in (obj.get("metadata", {}), obj.get("spec", {}).get("template", {}).get("metadata", {})):
        for key in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(key, None)
        annotations = meta.get("annotations", {})
        annotations.pop("checksum/config", None)
        if "annotations" in meta and not annotations:
            del meta["annotations"]
    return obj


def render(chart, values):
    out = chart.render(values, name="gpufill", namespace="gpufill", is_install=True)
    objs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            objs += load_yaml_docs(text)
    return objs


def check_chart(plain):
    try:
        from helm_python.chart import Chart, lint
    except ImportError:
        print("SKIP helm chart not rendered: helm-python-sdk is not installed")
        for name in ("Chart.yaml", "values.yaml"):
            with open(os.path.join(CHART, name)) as f:
                yaml.safe_load(f)
        print("ok   Chart.yaml and values.yaml parse")
        return
    report = lint(CHART, strict=True, kube_version="v" + VERSIONS[0])
    for m in report.get("messages", []):
        if m["severity"] >= 2:
            fail(f"helm lint: {m['path']}: {m['error']}")
    for e in report.get("errors", []):
        fail(f"helm lint: {e}")
    chart = Chart.load(CHART)
    value_sets = {
        "defaults": {},
        "serviceMonitor and MPS": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "mps": {"hostPipeDirectory": "/tmp/nvidia-mps"},
            "priorityClassName": "low", "extraArgs": ["--target", "40"],
            "extraEnv": [{"name": "TZ", "value": "Europe/Berlin"}], "localtimeFromHost": True,
        },
        "no metrics, no runtime class": {"metrics": {"enabled": False}, "runtimeClassName": ""},
    }
    for what, values in value_sets.items():
        objs = render(chart, values)
        check_objects(f"helm render ({what})", objs)
        ds = next(o for o in objs if o["kind"] == "DaemonSet")
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        if values.get("metrics", {}).get("enabled", True) != ("--metrics" in args):
            fail(f"helm render ({what}): --metrics in args does not follow metrics.enabled")
    # The plain manifests mirror the chart's default render (with the ServiceMonitor on).
    rendered = {name_of(o): strip_helm(o) for o in render(chart, {"serviceMonitor": {"enabled": True}})}
    for obj in plain:
        if obj["kind"] == "Namespace":
            continue
        other = rendered.pop(name_of(obj), None)
        if other is None:
            fail(f"deploy/kubernetes: {name_of(obj)} has no counterpart in the chart")
        elif other != obj:
            fail(f"deploy/kubernetes: {name_of(obj)} differs from the chart's default render:\n"
                 + diff(obj, other))
    for name in rendered:
        fail(f"helm chart: {name} is missing from deploy/kubernetes")
    print("ok   helm chart: lint, renders, and the plain manifests mirror it")


def diff(a, b):
    import difflib
    dump = lambda o: yaml.safe_dump(o, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(dump(a), dump(b), "plain", "chart", lineterm=""))


def check_config(plain, gpufill):
    cm = next(o for o in plain if o["kind"] == "ConfigMap")
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(cm["data"]["gpufill.toml"])
    try:
        r = subprocess.run([gpufill, "config", "check", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        fail(f"ConfigMap gpufill.toml: gpufill config check exited {r.returncode}: {r.stderr.strip()}")
    else:
        print("ok   ConfigMap gpufill.toml passes gpufill config check")


def check_dashboard():
    path = os.path.join(DEPLOY, "grafana", "gpufill-dashboard.json")
    with open(path) as f:
        dash = json.load(f)
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(dash)
    try:
        import promql_parser
    except ImportError:
        promql_parser = None
        print("SKIP dashboard queries not parsed: promql-parser is not installed")
    used = set()
    for expr in exprs:
        if promql_parser:
            # Grafana's variables are not PromQL: put placeholders in.
            plain = re.sub(r"\$__\w+", "5m", expr)
            plain = re.sub(r"\$\{?\w+\}?", "x", plain)
            try:
                promql_parser.parse(plain)
            except Exception as e:
                fail(f"dashboard: {expr!r} is not PromQL: {e}")
        for name in re.findall(r"\bgpufill_[a-z_]+", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if base not in METRICS:
                fail(f"dashboard: unknown metric {name} in {expr!r}")
            used.add(base)
    for needed in ("gpufill_utilization_percent", "gpufill_target_percent", "gpufill_duty_ratio",
                   "gpufill_state", "gpufill_yields_total", "gpufill_memory_used_bytes",
                   "gpufill_power_watts"):
        if needed not in used:
            fail(f"dashboard: no panel queries {needed}")
    print(f"ok   dashboard: {len(exprs)} queries, metrics {', '.join(sorted(used))}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpufill", help="a gpufill binary, for `config check` of the ConfigMap")
    a = p.parse_args()
    plain = plain_manifests()
    self_test(plain)
    check_chart(plain)
    if a.gpufill:
        check_config(plain, a.gpufill)
    check_dashboard()
    if failures:
        print(f"{len(failures)} deploy check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
