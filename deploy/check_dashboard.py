"""The Grafana dashboard against the binary, for deploy/check_manifests.py.

- a Prometheus data source input (the import dialog offers it), queries that parse as
  PromQL (PyPI promql-parser), filters and legends by node (never instance);
- every gpufill metric of a real scrape is on some panel, and no panel queries a metric
  the scrape lacks;
- the state timeline maps every state of the scrape, and each number it maps is the one
  its query gives that state;
- `__requires` names a Grafana at least as new as the one that introduced the
  dashboard's schemaVersion.
A self-test breaks copies of the dashboard and expects each break to be found.
"""
import copy
import re

# schemaVersion -> the first Grafana that writes it. 39 is the migration of the
# timeSeriesTable transformation's options (grafana/grafana
# apps/dashboard/pkg/migration/schemaversion/v39.go, first in the frontend's migrator
# with PR #76801, merged after 10.2 was cut: Grafana 10.3.0).
SCHEMA_GRAFANA = {39: (10, 3, 0)}
# Metrics of the scrape that need no panel of their own.
NO_PANEL = {"process_start_time_seconds"}


def promql_names(expr):
    """Names of series in a query: identifiers before '{' or standing alone; label names,
    functions and keywords are told apart by what follows them."""
    return set(re.findall(r"\b(gpufill_[a-z_]+|process_[a-z_]+|up)\b(?!\s*\()", expr))


def promql_error(expr):
    """Why `expr` (with Grafana's variables) is not PromQL, or None; None also when
    promql-parser is not installed."""
    try:
        import promql_parser
    except ImportError:
        return None
    # Grafana's variables are not PromQL: put placeholders in.
    plain = re.sub(r"\$__\w+", "5m", expr)
    plain = re.sub(r"\$\{?\w+\}?", "x", plain)
    try:
        promql_parser.parse(plain)
    except Exception as e:
        return str(e)
    return None


def targets(dash):
    """Every query of the dashboard (a dict with an `expr`), in panel order."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(dash.get("panels", []))
    return found


def state_problems(dash, states):
    timelines = [p for p in dash.get("panels", []) if p.get("type") == "state-timeline"]
    if len(timelines) != 1:
        return [f"dashboard: {len(timelines)} state timelines, expected one"]
    panel = timelines[0]
    mapped = {}
    for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
        for value, option in mapping.get("options", {}).items():
            mapped[int(value)] = option.get("text")
    queried = {int(n): s for n, s in re.findall(r'(\d+) \* max by \(node, gpu\) \(gpufill_state\{[^}]*state="(\w+)"\}\)',
                                              panel["targets"][0]["expr"])}
    found = []
    for state in sorted(states - set(mapped.values())):
        found.append(f"dashboard: the state timeline does not map state {state} (it would show as a blank number)")
    for state in sorted(set(mapped.values()) - states):
        found.append(f"dashboard: the state timeline maps {state}, which gpufill does not have")
    if mapped != queried:
        found.append(f"dashboard: the state timeline maps {mapped} but its query gives {queried}")
    return found


def version_problems(dash):
    schema = dash.get("schemaVersion")
    if schema not in SCHEMA_GRAFANA:
        return [f"dashboard: schemaVersion {schema}: add the first Grafana that writes it to SCHEMA_GRAFANA"]
    grafana = [r for r in dash.get("__requires", []) if r.get("type") == "grafana"]
    if not grafana:
        return ["dashboard: __requires names no Grafana version"]
    have = tuple(int(x) for x in re.findall(r"\d+", grafana[0].get("version", ""))[:3])
    need = SCHEMA_GRAFANA[schema]
    if have < need:
        return [f"dashboard: __requires Grafana {grafana[0].get('version')}, older than schemaVersion {schema} "
                f"needs ({'.'.join(map(str, need))})"]
    return []


def problems(dash, known, states):
    """What is wrong with the dashboard `dash`, given the scrape's metric names and states."""
    found = []
    inputs = [i for i in dash.get("__inputs", []) if i.get("type") == "datasource" and i.get("pluginId") == "prometheus"]
    if not inputs:
        found.append("dashboard: no __inputs entry for a Prometheus data source (Grafana's import dialog would offer none)")
    used = set()
    for t in targets(dash):
        expr = t["expr"]
        error = promql_error(expr)
        if error:
            found.append(f"dashboard: {expr!r} is not PromQL: {error}")
        if "instance" in expr or "instance" in t.get("legendFormat", ""):
            found.append(f"dashboard: {expr!r} uses instance; legends and filters use node (the ServiceMonitor's label)")
        if "legendFormat" in t and "{{node}}" not in t["legendFormat"]:
            found.append(f"dashboard: legend {t['legendFormat']!r} does not name the node")
        for name in promql_names(expr):
            if name not in known:
                found.append(f"dashboard: unknown metric {name} in {expr!r}")
            used.add(name)
    for name in sorted(known - NO_PANEL - used):
        found.append(f"dashboard: no panel shows {name}")
    return found + state_problems(dash, states) + version_problems(dash), used


def breakages(dash):
    """Copies of the dashboard, each broken once."""
    def panel_without(metric):
        d = copy.deepcopy(dash)
        d["panels"] = [p for p in d["panels"] if not any(metric in t["expr"] for t in targets({"panels": [p]}))]
        return d

    def state_off_unmapped():
        d = copy.deepcopy(dash)
        for p in d["panels"]:
            for m in p.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                m["options"] = {k: v for k, v in m["options"].items() if v.get("text") != "off"}
        return d

    def old_grafana():
        d = copy.deepcopy(dash)
        for r in d["__requires"]:
            if r["type"] == "grafana":
                r["version"] = "10.0.0"
        return d

    def by_instance():
        d = copy.deepcopy(dash)
        targets(d)[0]["legendFormat"] = "{{instance}}"
        return d

    return {
        "no pauses panel": panel_without("gpufill_pauses_total"),
        "no staleness panel": panel_without("gpufill_last_tick_timestamp_seconds"),
        "state off unmapped": state_off_unmapped(),
        "__requires Grafana 10.0.0": old_grafana(),
        "a legend by instance": by_instance(),
    }


def self_test(dash, known, states):
    """The breakages that problems() misses."""
    return [what for what, broken in breakages(dash).items() if not problems(broken, known, states)[0]]
