#!/usr/bin/env python3
"""Offline checks of deploy/: Kubernetes manifests, the Helm chart, Pod Security, the alert
rules' copies, the Grafana dashboard and the PromQL in the docs.

Run by deploy/check.sh (which installs the validators); exits non-zero on any failure.

- Every object in deploy/kubernetes/*.yaml validates strictly (unknown fields rejected)
  against the Kubernetes JSON schemas bundled by the PyPI package kubernetes-validate,
  for the oldest and the newest Kubernetes version we claim. ServiceMonitor and
  PrometheusRule are CRDs that those schemas do not cover: they are checked against
  hand-written subsets in deploy/schemas/.
- Pod Security: no offline admission checker installs from the registries CI reaches
  (Kubernetes' pod-security-admission, Kyverno and kubescape are Go programs shipped
  outside them), so the controls of the Pod Security Standards
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/) are implemented
  below, field by field, for "baseline" and "restricted". The default render and the
  plain manifests must meet "restricted"; each opt-in that needs more is checked to
  need exactly "privileged", as the docs say; a self-test breaks each control once.
- The Helm chart is linted and rendered offline (PyPI helm-python-sdk, Helm's Go SDK)
  with several value sets, every rendered object is validated the same way, values with
  typos are rejected by values.schema.json, and the plain manifests must equal the
  default render except for Helm's own labels and the config checksum.
- One gpufill per GPU: the chart refuses a rollout surge (maxSurge above 0), with and
  without claims.hostPath, naming it; claims.hostPath mounts the host's directory at
  /run/gpufill (type Directory) and needs exactly "privileged"; the default render and the
  plain manifests have maxSurge 0 and no such mount.
- Each values example in the chart's ci/ (chart-testing's convention) renders, validates,
  and meets the Pod Security level its first comment names; the chart has a README that
  names every top-level value.
- The ServiceMonitor takes relabelings, metricRelabelings and honorLabels; the NetworkPolicy
  admits networkPolicy.namespaces and .from; the dashboard ConfigMap (dashboard.enabled)
  carries the label Grafana's sidecar watches and deploy/grafana/gpufill-dashboard.json,
  whose copy in the chart must equal it.
- The PrometheusRule (chart and plain) carries exactly deploy/prometheus/gpufill-rules.yaml.
- The ConfigMap's gpufill.toml passes `gpufill config check` (with --gpufill). The chart
  refuses a config that is not TOML at render, and its init container (run
  here with --gpufill on the rendered ConfigMap) refuses one that gpufill refuses.
- The dashboard (check_dashboard.py) shows every metric of a real scrape of gpufill
  (--scrape) and no other, maps every state, and names a Grafana that reads its schema;
  every metric the rules name is in the scrape. The ```promql blocks of
  docs/operations.md parse.
- The docs match the binary: the metric tables of docs/operations.md and README.md name
  exactly the metrics of the scrape, with exactly its states and PID views;
  operations.md's alert table names exactly the rules' alerts, and its endpoint table
  exactly the paths the running server names (--endpoints). A self-test breaks copies of
  the docs and expects each check to fail.
- A self-test breaks copies of the DaemonSet, ServiceMonitor and PrometheusRule and
  expects the validation to fail.
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

import jsonschema
import kubernetes_validate
import yaml

import check_dashboard
import check_docs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
CHART = os.path.join(DEPLOY, "helm", "gpufill")
RULES = os.path.join(DEPLOY, "prometheus", "gpufill-rules.yaml")
# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and the newest schemas.
VERSIONS = ["1.25.0", kubernetes_validate.utils.latest_version()]
LOCAL_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
}
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


def find(objs, kind):
    return next((o for o in objs if o["kind"] == kind), None)


def self_test(objs):
    """The validation must reject broken objects, or it proves nothing."""
    ds = find(objs, "DaemonSet")
    breakages = {
        "a port that is a string": lambda d: d["spec"]["template"]["spec"]["containers"][0]
        ["ports"][0].update(containerPort="metrics"),
        "an unknown field": lambda d: d["spec"]["template"]["spec"].update(hostPid=True),
        "no selector": lambda d: d["spec"].pop("selector"),
        "a probe with an unknown field": lambda d: d["spec"]["template"]["spec"]["containers"][0]
        ["readinessProbe"]["httpGet"].update(paht="/healthz"),
    }
    for what, breakage in breakages.items():
        broken = copy.deepcopy(ds)
        breakage(broken)
        try:
            validate(broken, VERSIONS[0])
        except Exception:
            continue
        fail(f"self-test: a DaemonSet with {what} passed validation")
    crd_breakages = {
        "ServiceMonitor": lambda o: o["spec"]["endpoints"][0].update(intervall="15s"),
        "PrometheusRule": lambda o: o["spec"]["groups"][0]["rules"][0].update(fro="5m"),
    }
    for kind, breakage in crd_breakages.items():
        broken = copy.deepcopy(find(objs, kind))
        breakage(broken)
        try:
            validate(broken, VERSIONS[0])
            fail(f"self-test: a {kind} with an unknown field passed validation")
        except jsonschema.ValidationError:
            pass
    print("ok   self-test: broken objects are rejected")


# --- Pod Security Standards ---------------------------------------------------------
# Baseline: https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Restricted: https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}


def containers_of(spec):
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            yield f"{kind}[{c.get('name')}]", c


def baseline_violations(meta, spec):
    v = []
    psc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            v.append(f"spec.{field}")
    for vol in spec.get("volumes") or []:
        if "hostPath" in vol:
            v.append(f"volume {vol.get('name')}: hostPath")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            v.append(f"sysctl {s.get('name')}")
    scopes = [("spec.securityContext", psc)]
    scopes += [(f"{where}.securityContext", c.get("securityContext") or {}) for where, c in containers_of(spec)]
    for where, sc in scopes:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            v.append(f"{where}.windowsOptions.hostProcess")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            v.append(f"{where}.seccompProfile Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            v.append(f"{where}.appArmorProfile Unconfined")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            v.append(f"{where}.seLinuxOptions")
    for where, c in containers_of(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            v.append(f"{where}: privileged")
        for cap in (sc.get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                v.append(f"{where}: capability {cap}")
        if sc.get("procMount", "Default") != "Default":
            v.append(f"{where}: procMount {sc['procMount']}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                v.append(f"{where}: hostPort {port['hostPort']}")
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            v.append(f"annotation {key}: {value}")
    return v


def restricted_violations(meta, spec):
    v = []
    psc = spec.get("securityContext") or {}
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            v.append(f"volume {vol.get('name')}: {', '.join(sorted(kinds))}")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for where, c in containers_of(spec):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            v.append(f"{where}: allowPrivilegeEscalation is not false")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            v.append(f"{where}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            v.append(f"{where}: runAsUser 0")
        if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            v.append(f"{where}: seccompProfile is not RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            v.append(f"{where}: capabilities do not drop ALL")
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                v.append(f"{where}: capability {cap}")
    if psc.get("runAsUser") == 0:
        v.append("spec.securityContext.runAsUser 0")
    return v


def pod_security_level(pod_template):
    """The strictest Pod Security Standards level the pod meets, and what keeps it from
    the next one."""
    meta, spec = pod_template.get("metadata") or {}, pod_template["spec"]
    base = baseline_violations(meta, spec)
    if base:
        return "privileged", base
    restricted = restricted_violations(meta, spec)
    return ("baseline", restricted) if restricted else ("restricted", [])


def check_pod_security(origin, objs, expected):
    ds = find(objs, "DaemonSet")
    level, why = pod_security_level(ds["spec"]["template"])
    if level != expected:
        fail(f"{origin}: the pod meets Pod Security '{level}', expected '{expected}': {'; '.join(why)}")
    return level


def pod_security_self_test(objs):
    """Each control, broken once in a copy of the default pod, lowers the level."""
    pod = find(objs, "DaemonSet")["spec"]["template"]
    c = lambda p: p["spec"]["containers"][0]
    sc = lambda p: c(p)["securityContext"]
    breakages = {
        "privileged": {
            "hostPID": lambda p: p["spec"].update(hostPID=True),
            "hostNetwork": lambda p: p["spec"].update(hostNetwork=True),
            "hostIPC": lambda p: p["spec"].update(hostIPC=True),
            "a privileged container": lambda p: sc(p).update(privileged=True),
            "capability SYS_ADMIN": lambda p: sc(p)["capabilities"].update(add=["SYS_ADMIN"]),
            "capability NET_RAW": lambda p: sc(p)["capabilities"].update(add=["NET_RAW"]),
            "a hostPath volume": lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "a hostPort": lambda p: c(p)["ports"][0].update(hostPort=9401),
            "seccomp Unconfined": lambda p: p["spec"]["securityContext"]["seccompProfile"].update(type="Unconfined"),
            "procMount Unmasked": lambda p: sc(p).update(procMount="Unmasked"),
            "an unsafe sysctl": lambda p: p["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
            "an AppArmor annotation": lambda p: p["metadata"].setdefault("annotations", {}).update(
                {"container.apparmor.security.beta.kubernetes.io/gpufill": "unconfined"}),
            "an SELinux user": lambda p: sc(p).update(seLinuxOptions={"user": "system_u"}),
            "hostProcess": lambda p: sc(p).update(windowsOptions={"hostProcess": True}),
        },
        "baseline": {
            "privilege escalation": lambda p: sc(p).update(allowPrivilegeEscalation=True),
            "no runAsNonRoot": lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"),
            "capabilities not dropped": lambda p: sc(p).pop("capabilities"),
            "capability CHOWN": lambda p: sc(p)["capabilities"].update(add=["CHOWN"]),
            "a nfs volume": lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
            "no seccomp profile": lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
        },
    }
    for expected, cases in breakages.items():
        for what, breakage in cases.items():
            broken = copy.deepcopy(pod)
            breakage(broken)
            level, _ = pod_security_level(broken)
            if level != expected:
                fail(f"self-test: a pod with {what} meets '{level}', expected '{expected}'")
    print(f"ok   self-test: {sum(map(len, breakages.values()))} Pod Security breakages each lower the level")


# --- the chart ----------------------------------------------------------------------
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


def render(chart, values, name="gpufill"):
    out = chart.render(values, name=name, namespace="gpufill", is_install=True)
    objs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            objs += load_yaml_docs(text)
    return objs


def pod_spec(objs):
    return find(objs, "DaemonSet")["spec"]["template"]["spec"]


def container(objs):
    return pod_spec(objs)["containers"][0]


def node_terms(objs):
    return (find(objs, "DaemonSet")["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


def rules_file_groups():
    with open(RULES) as f:
        return yaml.safe_load(f)["groups"]


def expect(what, cond):
    if not cond:
        fail(what)


# What each value set must render: objects by kind, and facts about them.
def alerts(objs):
    """The rendered PrometheusRule's rules, by alert name."""
    return {r["alert"]: r for g in find(objs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}


def value_sets():
    no_absent = lambda objs: "GpufillAbsent" not in alerts(objs)
    return {
        "defaults": ({}, "restricted", lambda o: [
            expect("defaults: no PrometheusRule without the ServiceMonitor", find(o, "PrometheusRule") is None),
            expect("defaults: no hostPID", "hostPID" not in find(o, "DaemonSet")["spec"]["template"]["spec"]),
            expect("defaults: both probes GET /healthz on the metrics port",
                   all(container(o)[p]["httpGet"] == {"path": "/healthz", "port": "metrics"}
                       for p in ("livenessProbe", "readinessProbe"))),
            expect("defaults: two node terms (GPU Feature Discovery, Node Feature Discovery), each without opted-out nodes",
                   [t["matchExpressions"][0]["key"] for t in node_terms(o)]
                   == ["nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"]
                   and all(t["matchExpressions"][1] == {"key": "gpufill.io/disabled", "operator": "NotIn",
                                                        "values": ["true"]} for t in node_terms(o))),
            expect("defaults: NODE_NAME from the node's name",
                   {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container(o)["env"]),
            expect("defaults: priority class system-node-critical, as the GPU Operator's node agents",
                   pod_spec(o).get("priorityClassName") == "system-node-critical"),
            expect("defaults: tolerates the nvidia.com/gpu NoSchedule taint and CriticalAddonsOnly, as the device plugin",
                   {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec(o)["tolerations"]
                   and {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod_spec(o)["tolerations"]),
            expect("defaults: metrics from the flag, no GPUFILL_METRICS override",
                   "0.0.0.0:9401" in container(o)["args"]
                   and not any(e["name"] == "GPUFILL_METRICS" for e in container(o)["env"])),
            expect("defaults: a NetworkPolicy, no egress, the metrics port from the namespace monitoring only",
                   find(o, "NetworkPolicy") is not None and find(o, "NetworkPolicy")["spec"]["egress"] == []
                   and find(o, "NetworkPolicy")["spec"]["ingress"] == [{
                       "ports": [{"port": "metrics", "protocol": "TCP"}],
                       "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}]),
            expect("defaults: a rolling update without a surge (maxSurge 0), no host claim directory",
                   find(o, "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
                   and not any(v["name"] == "claims" for v in pod_spec(o)["volumes"])
                   and not any(m["mountPath"] == "/run/gpufill" for m in container(o)["volumeMounts"])),
            expect("defaults: no dashboard ConfigMap", len([x for x in o if x["kind"] == "ConfigMap"]) == 1),
            expect("defaults: the init container config-check runs `gpufill config check` on the mounted config, same image",
                   [(c["name"], c["args"], c["image"]) for c in pod_spec(o)["initContainers"]]
                   == [("config-check", ["config", "check", "/etc/gpufill/gpufill.toml"], container(o)["image"])]
                   and {"name": "config", "mountPath": "/etc/gpufill", "readOnly": True}
                   in pod_spec(o)["initContainers"][0]["volumeMounts"]),
        ]),
        "serviceMonitor, MPS, hostPID": ({
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "mps": {"hostPipeDirectory": "/run/nvidia/mps/nvidia.com/gpu/pipe",
                    "hostShmDirectory": "/run/nvidia/mps/shm"}, "hostPID": True,
            "priorityClassName": "low", "extraArgs": ["--target", "40"],
            "extraEnv": [{"name": "TZ", "value": "Europe/Berlin"}], "localtimeFromHost": True,
        }, "privileged", lambda o: [
            expect("serviceMonitor: the PrometheusRule follows it", find(o, "PrometheusRule") is not None),
            expect("priorityClassName: the one given", pod_spec(o)["priorityClassName"] == "low"),
            expect("MPS beside the device plugin's sharing: its pipe directory mounted and named, its shm at /dev/shm",
                   {"name": "mps-shm", "mountPath": "/dev/shm"} in container(o)["volumeMounts"]
                   and {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/run/nvidia/mps/nvidia.com/gpu/pipe"}
                   in container(o)["env"]
                   and any(v["name"] == "mps-shm" and v["hostPath"]["path"] == "/run/nvidia/mps/shm"
                           for v in pod_spec(o)["volumes"])),
            expect("MPS: no GpufillUnseenWork (gpufill fills beside MPS clients on purpose), the other alerts stay",
                   "GpufillUnseenWork" not in alerts(o) and {"GpufillBelowTarget", "GpufillLoadFaults"} <= set(alerts(o))),
        ]),
        "no metrics, no runtime class": ({"metrics": {"enabled": False}, "runtimeClassName": "",
                                          "serviceMonitor": {"enabled": True}}, "restricted", lambda o: [
            expect("no metrics: no probes, no ports",
                   not {"livenessProbe", "readinessProbe", "ports"} & set(container(o))),
            expect("no metrics: the image's GPUFILL_METRICS emptied, so nothing listens",
                   {"name": "GPUFILL_METRICS", "value": ""} in container(o)["env"]
                   and "--metrics" not in container(o)["args"]),
            expect("no metrics: no Service, ServiceMonitor or PrometheusRule",
                   not {"Service", "ServiceMonitor", "PrometheusRule"} & {x["kind"] for x in o}),
        ]),
        "paused, prometheusRule forced on, digest, names": ({
            "paused": True, "prometheusRule": {"enabled": True}, "fullnameOverride": "gf", "priorityClassName": "",
            "image": {"repository": "r/gpufill", "digest": "sha256:" + "ab" * 32},
        }, "restricted", lambda o: [
            expect("paused: every node term excludes every node",
                   all({"key": "kubernetes.io/hostname", "operator": "DoesNotExist"} in t["matchExpressions"]
                       for t in node_terms(o))),
            expect("paused: no GpufillAbsent alert", no_absent(o)),
            expect("digest: the image is pulled by digest", container(o)["image"] == "r/gpufill@sha256:" + "ab" * 32),
            expect("fullnameOverride: names and the rules' job follow it",
                   find(o, "DaemonSet")["metadata"]["name"] == "gf"
                   and 'up{job="gf"}' in alerts(o)["GpufillDown"]["expr"]),
            expect("not MPS: GpufillUnseenWork is there", "GpufillUnseenWork" in alerts(o)),
            expect("priorityClassName empty: none", "priorityClassName" not in pod_spec(o)),
        ]),
        "CDI, NetworkPolicy, other labels, no opt-out": ({
            "cdi": {"enabled": True}, "runtimeClassName": "nvidia-cdi", "nameOverride": "filler",
            "networkPolicy": {"enabled": True, "namespaces": [], "from": []},
            "gpuNodeLabels": [{"key": "gpu", "value": "yes"}], "disableNodeLabel": "",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
        }, "restricted", lambda o: [
            expect("cdi: the CDI annotation asks for every GPU",
                   find(o, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["cdi.k8s.io/gpufill"]
                   == "nvidia.com/gpu=all"),
            expect("networkPolicy.namespaces and .from empty: no egress, the metrics port from anywhere",
                   find(o, "NetworkPolicy")["spec"]["egress"] == []
                   and find(o, "NetworkPolicy")["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]),
            expect("gpuNodeLabels and no disableNodeLabel: one term, one expression",
                   node_terms(o) == [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}]),
        ]),
        "claims.hostPath, relabelings, dashboard, scrape namespaces": ({
            "claims": {"hostPath": "/run/gpufill"},
            "serviceMonitor": {"enabled": True, "honorLabels": True,
                               "relabelings": [{"targetLabel": "cluster", "replacement": "a"}],
                               "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "x", "action": "drop"}]},
            "dashboard": {"enabled": True, "namespace": "grafana", "annotations": {"grafana_folder": "GPUs"}},
            "networkPolicy": {"namespaces": ["prometheus", "victoria"], "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
        }, "privileged", lambda o: [
            expect("claims.hostPath: the host's directory (type Directory) at /run/gpufill",
                   {"name": "claims", "hostPath": {"path": "/run/gpufill", "type": "Directory"}} in pod_spec(o)["volumes"]
                   and {"name": "claims", "mountPath": "/run/gpufill"} in container(o)["volumeMounts"]),
            expect("serviceMonitor: honorLabels, the chart's node relabeling first, then the given ones, metricRelabelings",
                   find(o, "ServiceMonitor")["spec"]["endpoints"][0]["honorLabels"] is True
                   and [r.get("targetLabel") for r in find(o, "ServiceMonitor")["spec"]["endpoints"][0]["relabelings"]]
                   == ["node", "cluster"]
                   and find(o, "ServiceMonitor")["spec"]["endpoints"][0]["metricRelabelings"]
                   == [{"sourceLabels": ["__name__"], "regex": "x", "action": "drop"}]),
            expect("networkPolicy: each namespace a peer, then the given peers",
                   find(o, "NetworkPolicy")["spec"]["ingress"][0]["from"] == [
                       {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}},
                       {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "victoria"}}},
                       {"ipBlock": {"cidr": "10.0.0.0/8"}}]),
            check_dashboard_configmap(o, "grafana"),
        ]),
        "privileged, no NetworkPolicy": ({"privileged": True, "networkPolicy": {"enabled": False}}, "privileged", lambda o: [
            expect("privileged: a privileged container that may escalate (the API refuses privileged without it)",
                   container(o)["securityContext"]["privileged"] is True
                   and container(o)["securityContext"]["allowPrivilegeEscalation"] is True),
            expect("privileged: the init container is not", "privileged" not in pod_spec(o)["initContainers"][0]["securityContext"]),
            expect("networkPolicy.enabled false: no NetworkPolicy", find(o, "NetworkPolicy") is None),
        ]),
    }


# Values with typos: the schema must reject each, in lint and in render.
BAD_VALUES = {
    "nodeSelecter (a typo)": {"nodeSelecter": {"a": "b"}},
    "image.tagg (a typo)": {"image": {"tagg": "1.0"}},
    "metrics.port: abc": {"metrics": {"port": "abc"}},
    "a malformed image.digest": {"image": {"digest": "latest"}},
    "prometheusRule.enabled: yes (a string)": {"prometheusRule": {"enabled": "yes"}},
}


# Configs gpufill refuses. Not TOML: the chart refuses it at render, before
# any pod exists. TOML that gpufill refuses: the init container config-check does.
NOT_TOML = {"an unclosed array": "target_percent = [[ 500", "a key without a value": "[yield]\ngrace_s =\n"}
REFUSED_BY_GPUFILL = {"target_percent = 500": "target_percent = 500\n",
                      "an unknown key": "[yield]\ngrace = 3\n"}


def run_init_container(objs, gpufill):
    """Runs the rendered init container's command with `gpufill` on the rendered
    ConfigMap's gpufill.toml; returns the completed process."""
    init = pod_spec(objs)["initContainers"][0]
    mount = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "config")
    with tempfile.TemporaryDirectory() as d:
        for name, text in find(objs, "ConfigMap")["data"].items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        args = [a.replace(mount, d) for a in init["args"]]
        return subprocess.run([gpufill] + args, capture_output=True, text=True)


# GPU requests: the chart refuses each at render, naming it.
GPU_REQUESTS = {
    "resources.limits": {"resources": {"limits": {"nvidia.com/gpu": 1}}},
    "resources.requests": {"resources": {"requests": {"cpu": "50m", "nvidia.com/gpu": 1}}},
}


def expect_refused(chart, what, values, *needles):
    """Rendering `values` must fail, its error naming each of `needles`."""
    try:
        render(chart, values)
    except Exception as e:
        if not all(n in str(e) for n in needles):
            fail(f"helm render: {what} failed, but not naming it: {e}")
        return
    fail(f"helm render: {what} rendered")


def check_gpu_request_refusal(chart):
    for what, values in GPU_REQUESTS.items():
        expect_refused(chart, f'{what}."nvidia.com/gpu"', values,
                       f'{what}."nvidia.com/gpu": gpufill must not request a GPU')
    render(chart, {"resources": {"limits": {"cpu": "1", "memory": "512Mi"}}})
    print('ok   helm chart: render refuses resources.limits and .requests "nvidia.com/gpu", naming them')


def check_config_refusal(chart, gpufill):
    # `helm lint` only logs a template's `fail` (lint mode), so render is what refuses.
    for what, config in NOT_TOML.items():
        expect_refused(chart, f"a config with {what}", {"config": config}, "not valid TOML")
    if gpufill:
        for what, config in REFUSED_BY_GPUFILL.items():
            r = run_init_container(render(chart, {"config": config}), gpufill)
            if r.returncode != 2 or not r.stderr.startswith("gpufill: "):
                fail(f"init container config-check: a config with {what} exited {r.returncode} ({r.stderr.strip()!r}), not 2")
        r = run_init_container(render(chart, {}), gpufill)
        if r.returncode != 0:
            fail(f"init container config-check: the default config exited {r.returncode}: {r.stderr.strip()}")
    print(f"ok   helm chart: render refuses configs that are not TOML ({', '.join(NOT_TOML)}); the init "
          f"container refuses {', '.join(REFUSED_BY_GPUFILL)} (exit 2) and accepts the default"
          + ("" if gpufill else " (not run: no --gpufill)"))


DASHBOARD = os.path.join(DEPLOY, "grafana", "gpufill-dashboard.json")
CHART_DASHBOARD = os.path.join(CHART, "dashboards", "gpufill-dashboard.json")


def check_dashboard_configmap(objs, namespace):
    """The dashboard ConfigMap: the sidecar's label, its namespace, and the dashboard with
    its data source input left to the variable (provisioning fills in no inputs)."""
    cm = next((x for x in objs if x["kind"] == "ConfigMap" and x["metadata"]["name"].endswith("-dashboard")), None)
    if cm is None:
        return fail("dashboard.enabled: no dashboard ConfigMap")
    with open(DASHBOARD) as f:
        want = json.loads(f.read().replace("${DS_PROMETHEUS}", "default"))
    expect("dashboard: label grafana_dashboard \"1\" (the sidecar's default), in dashboard.namespace",
           cm["metadata"]["labels"].get("grafana_dashboard") == "1" and cm["metadata"]["namespace"] == namespace)
    expect("dashboard: the ConfigMap carries deploy/grafana/gpufill-dashboard.json, no ${DS_PROMETHEUS} left",
           json.loads(cm["data"]["gpufill-dashboard.json"]) == want
           and "${DS_" not in cm["data"]["gpufill-dashboard.json"])


def check_dashboard_copy():
    with open(DASHBOARD) as a, open(CHART_DASHBOARD) as b:
        if a.read() != b.read():
            fail(f"{os.path.relpath(CHART_DASHBOARD, ROOT)} differs from {os.path.relpath(DASHBOARD, ROOT)}: "
                 "copy it (the chart can only read its own files)")
            return
    print("ok   the chart's dashboard is deploy/grafana/gpufill-dashboard.json")


# Surges the chart refuses: with and without the host's claim directory, each naming it.
SURGES = {
    "maxSurge 1": {"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}},
    "maxSurge 10%": {"updateStrategy": {"rollingUpdate": {"maxSurge": "10%", "maxUnavailable": 0}}},
    "maxSurge 1 with claims.hostPath": {"claims": {"hostPath": "/run/gpufill"},
                                        "updateStrategy": {"rollingUpdate": {"maxSurge": 1}}},
}


def check_surge_refusal(chart):
    for what, values in SURGES.items():
        expect_refused(chart, what, values, "updateStrategy.rollingUpdate.maxSurge", "leave maxSurge 0")
    render(chart, {"updateStrategy": {"rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "10%"}}})
    print(f"ok   helm chart: render refuses a rollout surge ({', '.join(SURGES)}), accepts maxSurge 0%")


def check_examples(chart):
    """Every values example in ci/: renders, validates, meets the level its first comment
    names (`Pod Security: LEVEL`)."""
    paths = sorted(glob.glob(os.path.join(CHART, "ci", "*-values.yaml")))
    if not paths:
        fail("helm chart: no values examples in ci/")
    for path in paths:
        name = os.path.relpath(path, ROOT)
        with open(path) as f:
            text = f.read()
        level = re.search(r"^#.*Pod Security: (\w+)", text, re.M)
        if not level:
            fail(f"{name}: its comment names no Pod Security level")
            continue
        objs = render(chart, yaml.safe_load(text) or {})
        check_objects(f"helm render ({name})", objs)
        got = check_pod_security(f"helm render ({name})", objs, level.group(1))
        print(f"ok   helm render ({name}): Pod Security '{got}'")


def check_chart_readme():
    """The chart's README names every top-level value (and no value that is gone)."""
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = set(yaml.safe_load(f))
    path = os.path.join(CHART, "README.md")
    if not os.path.exists(path):
        return fail("helm chart: no README.md")
    with open(path) as f:
        first_cells = re.findall(r"^\| (`[^|]*)\|", f.read(), re.M)
    named = {name for cell in first_cells for name in re.findall(r"`([A-Za-z]+)`", cell)}
    for key in sorted(values - named):
        fail(f"deploy/helm/gpufill/README.md: value {key} is not in its table")
    for key in sorted(named - values):
        fail(f"deploy/helm/gpufill/README.md: names {key}, which values.yaml does not have")
    print(f"ok   deploy/helm/gpufill/README.md names the {len(values)} top-level values")


def check_chart(plain, gpufill=None):
    try:
        from helm_python.chart import Chart, lint
    except ImportError:
        print("SKIP helm chart not rendered: helm-python-sdk is not installed")
        for name in ("Chart.yaml", "values.yaml", "values.schema.json"):
            with open(os.path.join(CHART, name)) as f:
                yaml.safe_load(f)
        print("ok   Chart.yaml, values.yaml and values.schema.json parse")
        return
    report = lint(CHART, strict=True, kube_version="v" + VERSIONS[0])
    for m in report.get("messages", []):
        if m["severity"] >= 2:
            fail(f"helm lint: {m['path']}: {m['error']}")
    for e in report.get("errors", []):
        fail(f"helm lint: {e}")
    chart = Chart.load(CHART)
    for what, values in BAD_VALUES.items():
        bad_lint = lint(CHART, values, strict=True, kube_version="v" + VERSIONS[0])
        if not bad_lint.get("errors"):
            fail(f"helm lint: values with {what} passed")
        try:
            render(chart, values)
            fail(f"helm render: values with {what} rendered")
        except Exception as e:
            if "schema" not in str(e):
                fail(f"helm render: values with {what} failed, but not by the schema: {e}")
    print(f"ok   helm chart: lint --strict; values.schema.json rejects {', '.join(BAD_VALUES)}")
    check_config_refusal(chart, gpufill)
    check_gpu_request_refusal(chart)
    check_surge_refusal(chart)
    check_examples(chart)
    for what, (values, level, facts) in value_sets().items():
        objs = render(chart, values)
        check_objects(f"helm render ({what})", objs)
        facts(objs)
        args = container(objs)["args"]
        if values.get("metrics", {}).get("enabled", True) != ("--metrics" in args):
            fail(f"helm render ({what}): --metrics in args does not follow metrics.enabled")
        got = check_pod_security(f"helm render ({what})", objs, level)
        print(f"ok   helm render ({what}): Pod Security '{got}'")
    # The plain manifests mirror the chart's default render (with the ServiceMonitor on,
    # which turns the PrometheusRule on).
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
    print("ok   helm chart: renders, values behave as documented, and the plain manifests mirror it")


def check_rules_copies(plain):
    groups = rules_file_groups()
    rule = find(plain, "PrometheusRule")
    if rule is None or rule["spec"]["groups"] != groups:
        fail("deploy/kubernetes/prometheusrule.yaml does not carry deploy/prometheus/gpufill-rules.yaml's groups")
    else:
        print("ok   deploy/kubernetes/prometheusrule.yaml carries gpufill-rules.yaml (and the chart's render equals it)")


def diff(a, b):
    import difflib
    dump = lambda o: yaml.safe_dump(o, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(dump(a), dump(b), "plain", "chart", lineterm=""))


def check_config(plain, gpufill):
    cm = find(plain, "ConfigMap")
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


# --- metrics: the dashboard, the rules, the docs -------------------------------------
def scraped_metrics(path):
    """Every metric name in a scrape: its TYPE lines (present even without samples, e.g.
    gpufill_sm_activity_percent under metric = "util") and its samples."""
    names = set()
    with open(path) as f:
        for line in f:
            if line.startswith("# TYPE "):
                names.add(line.split()[2])
            elif line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def scraped_label_values(path, metric, label):
    """The values of `label` on the samples of `metric` in a scrape."""
    with open(path) as f:
        return set(re.findall(rf'^{metric}{{[^}}]*\b{label}="([^"]*)"', f.read(), re.M))


promql_names = check_dashboard.promql_names


def parse_promql(where, expr):
    error = check_dashboard.promql_error(expr)
    if error:
        fail(f"{where}: {expr!r} is not PromQL: {error}")


def check_grafana(known, states):
    with open(os.path.join(DEPLOY, "grafana", "gpufill-dashboard.json")) as f:
        dash = json.load(f)
    found, used = check_dashboard.problems(dash, known, states)
    for problem in found:
        fail(problem)
    for missed in check_dashboard.self_test(dash, known, states):
        fail(f"self-test: a dashboard with {missed} passed the dashboard check")
    print(f"ok   dashboard: data source input, {len(check_dashboard.targets(dash))} queries by node, every state "
          f"mapped, Grafana {dash['schemaVersion']} schema consistent with __requires; metrics "
          f"{', '.join(sorted(used))} (and broken copies fail)")


def check_rules_metrics(known):
    used = set()
    for group in rules_file_groups():
        for rule in group["rules"]:
            for name in promql_names(rule["expr"]):
                if name != "up" and name not in known:
                    fail(f"{os.path.relpath(RULES, ROOT)}: {rule.get('alert')}: unknown metric {name}")
                used.add(name)
    print(f"ok   alert rules use known metrics: {', '.join(sorted(used))}")


def check_docs_promql():
    path = os.path.join(ROOT, "docs", "operations.md")
    with open(path) as f:
        blocks = re.findall(r"```promql\n(.*?)```", f.read(), re.S)
    exprs = []
    for block in blocks:
        # A comment line or a blank line ends an expression.
        current = []
        for line in block.splitlines() + [""]:
            if line.strip() and not line.lstrip().startswith("#"):
                current.append(line)
            elif current:
                exprs.append("\n".join(current))
                current = []
    for expr in exprs:
        parse_promql("docs/operations.md", expr)
    print(f"ok   docs/operations.md: {len(exprs)} PromQL expression(s) parse")


def check_docs_match_binary(scrape, endpoints_body):
    docs = {}
    for path in (check_docs.OPS, check_docs.README):
        with open(os.path.join(ROOT, path)) as f:
            docs[path] = f.read()
    have = {
        "metrics": scraped_metrics(scrape),
        "states": scraped_label_values(scrape, "gpufill_state", "state"),
        "views": scraped_label_values(scrape, "gpufill_pid_view", "view"),
        "alerts": {r["alert"] for g in rules_file_groups() for r in g["rules"]},
        "endpoints": set(re.findall(r"(/[a-z_]+)", endpoints_body)),
    }
    for what in ("states", "views", "endpoints"):
        if len(have[what]) < 2:
            fail(f"docs check: the binary showed {sorted(have[what])} as its {what}: the scrape or its 404 answer changed")
    for problem in check_docs.problems(docs, have):
        fail(problem)
    for missed in check_docs.self_test(docs, have):
        fail(f"self-test: docs with {missed} passed the docs check")
    print(f"ok   {check_docs.OPS} and {check_docs.README} name the binary's {len(have['metrics'])} metrics, "
          f"states {', '.join(sorted(have['states']))}, PID views; {check_docs.OPS} its "
          f"{len(have['alerts'])} alerts and paths {', '.join(sorted(have['endpoints']))} (and broken copies fail)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpufill", help="a gpufill binary, for `config check` of the ConfigMap")
    p.add_argument("--scrape", required=True, help="a scrape of gpufill's /metrics")
    p.add_argument("--endpoints", required=True,
                   help="what the metrics server answers for an unknown path (it names its paths)")
    a = p.parse_args()
    known = scraped_metrics(a.scrape)
    plain = plain_manifests()
    self_test(plain)
    level = check_pod_security("deploy/kubernetes", plain, "restricted")
    print(f"ok   deploy/kubernetes: the DaemonSet's pod meets Pod Security '{level}'")
    pod_security_self_test(plain)
    check_chart(plain, a.gpufill)
    check_chart_readme()
    check_dashboard_copy()
    check_rules_copies(plain)
    if a.gpufill:
        check_config(plain, a.gpufill)
    check_grafana(known, scraped_label_values(a.scrape, "gpufill_state", "state"))
    check_rules_metrics(known)
    check_docs_promql()
    with open(a.endpoints) as f:
        check_docs_match_binary(a.scrape, f.read())
    if failures:
        print(f"{len(failures)} deploy check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
