"""The docs against the binary, for deploy/check_manifests.py.

An operator reading docs/operations.md (or README.md's table) should find every metric,
state, PID view, alert and endpoint that gpufill has, and nothing it lacks. What the
binary has comes from a real scrape of `gpufill simulate --metrics` (TYPE lines name
every series, even those without samples there), the rules file, and the paths the
running server names in its 404 answer; the docs' tables are parsed and compared.

The two metric tables are generated from the series list in code, between
`<!-- metrics:begin` and `<!-- metrics:end -->`, and a test of the binary
(gpufill-cli/tests/generated.rs) keeps them equal to it, text and all. This check
stays as the end-to-end one: the tables against what a running gpufill serves.
"""
import re

OPS = "docs/operations.md"
README = "README.md"


def table_after(text, heading):
    """The body rows (lists of cells) of the first Markdown table after the line
    `heading`; [] when the heading is missing."""
    lines = text.splitlines()
    if heading not in lines:
        return []
    rows = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("|"):
            # Split on unescaped pipes: `a\|b` inside a cell stays.
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
        elif rows:
            break
    return rows[2:]  # the header and the separator


def first_code(cell):
    """The start of the first `code` span of a cell: a metric, alert or path name."""
    m = re.match(r"`([^`{]+)", cell)
    return m.group(1) if m else None


def metric_rows(text, heading):
    """Metric name -> the whole row, for the table after `heading`."""
    return {first_code(cells[0]): " | ".join(cells)
            for cells in table_after(text, heading) if first_code(cells[0])}


def label_values(row, label):
    """The values of `label` a row names in its first cell: `name{label="a\\|b"}`."""
    m = re.match(r"`[^`{]*\{" + label + r'="([^"]*)"', row)
    return {v for v in re.split(r"\\?\|", m.group(1)) if v} if m else set()


def problems(docs, have):
    """What the docs (path -> text) say that the binary does not, and the reverse.
    `have` holds the binary's sets: metrics, states, views, alerts, endpoints."""
    found = []

    def compare(where, what, documented, actual):
        for name in sorted(actual - documented):
            found.append(f"{where}: {what} {name} is missing (the binary has it)")
        for name in sorted(documented - actual):
            found.append(f"{where}: {what} {name} is documented but the binary has none")

    for path, heading in ((OPS, "### Metrics"), (README, "## Metrics")):
        rows = metric_rows(docs[path], heading)
        compare(f"{path}, {heading.lstrip('# ')}", "metric", set(rows), have["metrics"])
        for metric, label, key in (("gpufill_state", "state", "states"), ("gpufill_pid_view", "view", "views")):
            if metric in rows:
                compare(f"{path}, {metric}", label, label_values(rows[metric], label), have[key])
    ops = docs[OPS]
    compare(f"{OPS}, Alerts", "alert",
            {first_code(c[0]) for c in table_after(ops, "### Alerts")} - {None}, have["alerts"])
    compare(f"{OPS}, Endpoints and probes", "path",
            {first_code(c[0]) for c in table_after(ops, "### Endpoints and probes")} - {None},
            have["endpoints"])
    return found


def breakages(docs):
    """Copies of the docs, each broken once in a way problems() must find."""
    ops, readme = docs[OPS], docs[README]

    def drop_row(text, start):
        out = [line for line in text.splitlines() if not line.startswith(start)]
        assert len(out) < len(text.splitlines()), f"no row starts with {start!r}"
        return "\n".join(out) + "\n"

    def add_row(text, before, row):
        assert before in text, before
        return text.replace(before, row + "\n" + before, 1)

    return {
        "operations.md without gpufill_load_faults_total": {
            OPS: drop_row(ops, "| `gpufill_load_faults_total`"), README: readme},
        "operations.md with a metric the binary lacks": {
            OPS: add_row(ops, "| `gpufill_worker_up` |", "| `gpufill_bogus_total` | counter | none |"),
            README: readme},
        "operations.md without the state off": {
            OPS: ops.replace("stopped\\|off", "stopped", 1), README: readme},
        "operations.md without GpufillUnseenWork": {
            OPS: drop_row(ops, "| `GpufillUnseenWork`"), README: readme},
        "operations.md without /healthz": {
            OPS: drop_row(ops, "| `/healthz`"), README: readme},
        "README.md without gpufill_pid_view": {
            OPS: ops, README: drop_row(readme, "| `gpufill_pid_view")},
        "README.md with a state the binary lacks": {
            OPS: ops, README: readme.replace("stopped\\|off", "stopped\\|off\\|sleeping", 1)},
    }


def self_test(docs, have):
    """Each breakage must be found; returns the ones that were not."""
    missed = []
    for what, broken in breakages(docs).items():
        if broken == docs:
            missed.append(f"{what} (the breakage changed nothing)")
        elif not problems(broken, have):
            missed.append(what)
    return missed
