"""Every relative link in the repository's Markdown, and every docs/ reference in its
Rust comments, against the files and headings there are. Offline, standard library only.

Markdown: each `[text](target)`, `[ref]: target`, `<a href>` and `<img src>` outside code
that is not a URL (no scheme) must name an existing file or folder inside the repository
(relative to the file, or to the root when it starts with `/`); a `#anchor` into a .md
file (or within the same file) must be one of its headings' anchors, by GitHub's rules:
the heading's text without markup, lowercased, every character that is not a letter, a
digit, a space, `-` or `_` dropped, each space made `-`, the second of the same anchor
`-1`, the third `-2`, ...; an explicit `<a id>` or `<a name>` counts too.

Rust: in comments, `docs/NAME.md` (read from the repository's root) must exist, its
`#anchor` must be one of its anchors, and a quoted section title right after it
(`docs/benchmarks.md, section "Live services"`) must begin one of its headings or of
the bold leads of its paragraphs.

Commands: every `scripts/...` path that docs/benchmarks.md names (in prose, code spans
and code blocks alike) must exist, and every `lab.py COMMAND` there must be one of the
lab's commands (`COMMANDS` in scripts/gpulab/cli.py, read as text), so that each figure's
command can be run from the tree. docs/benchmarks-history.md keeps commands as they were
run and is not checked; a section whose script is retired moves there, naming the commit
that has the script.

Usage: python3 deploy/check_links.py [ROOT]   (exit 1 naming every broken link; a
self-test first breaks copies of the docs and expects each breakage to be found)
"""
import os
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

SKIP_DIRS = {".git", "target", "carry", "node_modules", "__pycache__"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*<?([^\s>]+)>?(?:[ \t]+[\"'(].*)?$", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
RS_REF = re.compile(r"((?:\.\./)*docs/[\w.-]+\.md)(#[\w-]+)?")
RS_TITLE = re.compile(r"^`?[,:]?\s*(?:sections?\s+)?\"([^\"]+)\"")
BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(.+?)\*\*")
# A repository path under scripts/: at the start of a word or after `../` (not
# `other/scripts/...`), up to the first character a path here does not use.
SCRIPT_PATH = re.compile(r"(?:(?<=\.\./)|(?<![\w./-]))scripts/[\w.-][\w./-]*")
LAB_COMMAND = re.compile(r"\blab\.py[ \t]+([a-z][a-z-]*)")
LAB_DEFINITION = re.compile(r'^[ \t]+"([a-z][a-z-]*)":[ \t]*\(', re.M)
REPRODUCED = "docs/benchmarks.md"
LAB_CLI = "scripts/gpulab/cli.py"


def markdown_files(root):
    """The repository's Markdown files (tracked ones where git knows the tree)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"],
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return sorted(f for f in files if os.path.exists(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted(walk(root, ".md"))


def rust_files(root):
    return sorted(walk(root, ".rs"))


def walk(root, ext):
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for name in files:
            if name.endswith(ext):
                yield os.path.relpath(os.path.join(here, name), root)


def blank(match):
    """A match's text with everything but line ends made spaces (offsets stay)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def strip_code_spans(text):
    """The text with each `code` span blanked; a span does not cross a blank line."""
    return re.sub(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", blank, text, flags=re.S)


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line


def prose(text):
    """The text with fenced code blocks and code spans blanked, lines kept."""
    lines = text.splitlines()
    kept = dict(prose_lines(text))
    return strip_code_spans("\n".join(kept.get(n, "") for n in range(1, len(lines) + 1)))


def heading_text(raw):
    """A heading as GitHub renders it to text: code spans, links, images, HTML and
    emphasis markers reduced to their text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2).strip(), text)
    return text


def slug(text):
    """GitHub's anchor of a heading's rendered text (github-slugger): letters, marks,
    decimal digits, `_`, `-` and spaces stay, spaces become `-`."""
    text = text.strip().lower()
    text = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LM"
                   or unicodedata.category(c) in ("Nd", "Nl", "Pc"))
    return text.replace(" ", "-")


def headings(text):
    """The rendered text of each heading, in order."""
    return [heading_text(m.group(2)) for _, line in prose_lines(text)
            for m in [HEADING.match(line)] if m]


def anchors(text):
    """Every anchor a Markdown file defines."""
    seen = {}
    found = set()
    for title in headings(text):
        base = slug(title)
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    for _, line in prose_lines(text):
        found.update(EXPLICIT_ANCHOR.findall(line))
    return found


def links(text):
    """(line number, target) of every link in a Markdown file's prose; a link's text
    may run over several lines."""
    bare = prose(text)
    found = []
    for m in REF_DEF.finditer(bare):
        found.append((m.start(1), m.group(1)))
    for m in INLINE_LINK.finditer(bare):
        found.append((m.start(2), m.group(2)))
    for m in HTML_LINK.finditer(bare):
        found.append((m.start(1), m.group(1)))
    return [(bare.count("\n", 0, at) + 1, target) for at, target in sorted(found)]


class Tree:
    """The files under a root, read once each."""

    def __init__(self, root, overrides=None):
        self.root = os.path.realpath(root)
        self.overrides = overrides or {}
        self._anchors = {}
        self._titles = {}

    def read(self, rel):
        if rel in self.overrides:
            return self.overrides[rel]
        with open(os.path.join(self.root, rel), encoding="utf-8") as f:
            return f.read()

    def exists(self, rel):
        return rel in self.overrides or os.path.exists(os.path.join(self.root, rel))

    def anchors(self, rel):
        if rel not in self._anchors:
            self._anchors[rel] = anchors(self.read(rel))
        return self._anchors[rel]

    def titles(self, rel):
        """The headings of a Markdown file, and the bold leads of its paragraphs and list
        items (`- **SIGHUP at any time.** ...`), as one-line text: what a comment may
        quote as a section."""
        if rel not in self._titles:
            text = self.read(rel)
            leads = [m.group(1) for _, line in prose_lines(text) for m in [BOLD_LEAD.match(line)] if m]
            self._titles[rel] = [" ".join(heading_text(h).split()) for h in headings(text) + leads]
        return self._titles[rel]

    def resolve(self, source, path):
        """The repository-relative path a link in `source` names; None outside it."""
        if path.startswith("/"):
            full = os.path.join(self.root, path.lstrip("/"))
        else:
            full = os.path.join(self.root, os.path.dirname(source), path)
        rel = os.path.relpath(os.path.normpath(full), self.root)
        return None if rel == ".." or rel.startswith("../") else rel

    def target_problem(self, source, target):
        """What is wrong with one link target of `source`, or None."""
        path, _, fragment = target.partition("#")
        path, fragment = unquote(path), unquote(fragment)
        rel = source if path == "" else self.resolve(source, path)
        if rel is None:
            return "points outside the repository"
        if not self.exists(rel):
            return "no such file"
        if fragment and rel.endswith(".md") and fragment not in self.anchors(rel):
            return f"{rel} has no heading with anchor #{fragment}"
        return None


def check_markdown(tree, files):
    """Broken links of the Markdown files; returns (links checked, problems)."""
    checked, problems = 0, []
    for source in files:
        for number, target in links(tree.read(source)):
            if not target or SCHEME.match(target):
                continue
            checked += 1
            why = tree.target_problem(source, target)
            if why:
                problems.append(f"{source}:{number}: ({target}): {why}")
    return checked, problems


def comment_text(text):
    """A Rust file's comments as (line number, text) runs: each run of comment lines
    joined by spaces, with the line number of each character's line."""
    runs, current = [], []
    for number, line in enumerate(text.splitlines(), 1):
        m = re.search(r"//[/!]?(.*)$", line)
        if m and "\"" not in line[:m.start()]:
            current.append((number, m.group(1).strip()))
        else:
            if current:
                runs.append(current)
            current = []
    if current:
        runs.append(current)
    for run in runs:
        joined, lines = "", []
        for number, part in run:
            if joined:
                joined += " "
                lines.append(number)
            joined += part
            lines.extend([number] * len(part))
        yield joined, lines


def check_rust(tree, files):
    """docs/ references in the Rust comments; returns (references checked, problems)."""
    checked, problems = 0, []
    for source in files:
        for text, lines in comment_text(tree.read(source)):
            for m in RS_REF.finditer(text):
                if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_-/"):
                    continue  # gpufill-cli/docs/... or the like: not the repository's docs/
                path, anchor = m.group(1), m.group(2) or ""
                rel = tree.resolve(source, path) if path.startswith("..") else path
                where = f"{source}:{lines[m.start()]}"
                checked += 1
                # "" as the source: the path is read from the repository's root.
                why = "points outside the repository" if rel is None else tree.target_problem("", rel + anchor)
                if why:
                    problems.append(f"{where}: ({path}{anchor}): {why}")
                    continue
                title = RS_TITLE.match(text[m.end():])
                if title and rel.endswith(".md"):
                    want = " ".join(heading_text(title.group(1)).split())
                    if not any(h.startswith(want) for h in tree.titles(rel)):
                        problems.append(f"{where}: ({path}, \"{title.group(1)}\"): "
                                        f"no heading or bold lead of {rel} begins with it")
    return checked, problems


def check_commands(tree):
    """The scripts/ paths and lab commands docs/benchmarks.md names; returns (named,
    problems)."""
    text = tree.read(REPRODUCED)
    lab = set(LAB_DEFINITION.findall(tree.read(LAB_CLI))) if tree.exists(LAB_CLI) else set()
    named, problems = 0, []
    for number, line in enumerate(text.splitlines(), 1):
        for m in SCRIPT_PATH.finditer(line):
            named += 1
            path = m.group(0).rstrip(".")
            if not tree.exists(path):
                problems.append(f"{REPRODUCED}:{number}: ({path}): no such file; a section whose "
                                "script is retired belongs in docs/benchmarks-history.md")
        for m in LAB_COMMAND.finditer(line):
            named += 1
            if m.group(1) not in lab:
                problems.append(f"{REPRODUCED}:{number}: (lab.py {m.group(1)}): not a command "
                                f"of the lab ({LAB_CLI})")
    return named, problems


def check(root, overrides=None):
    tree = Tree(root, overrides)
    md_checked, md_problems = check_markdown(tree, markdown_files(tree.root))
    rs_checked, rs_problems = check_rust(tree, rust_files(tree.root))
    cmd_checked, cmd_problems = check_commands(tree)
    return md_checked, rs_checked, cmd_checked, md_problems + rs_problems + cmd_problems


def self_test(root):
    """Each breakage of a copy of the docs must be found; returns those that were not."""
    tree = Tree(root)
    readme = tree.read("README.md")
    bench = tree.read("docs/benchmarks.md")
    heading = re.search(r"^## (.*)$", bench, re.M).group(1)
    # The heading of benchmarks.md that README.md's first anchor into it names.
    linked = re.search(r"\]\(docs/benchmarks\.md#([\w-]+)\)", readme).group(1)
    linked_line = next(line for line in bench.splitlines()
                       if HEADING.match(line) and slug(heading_text(HEADING.match(line).group(2))) == linked)
    breakages = {
        "a link to a missing file": {"README.md": readme + "\n[x](docs/no-such-file.md)\n"},
        "a link to a missing anchor": {"README.md": readme + "\n[x](docs/benchmarks.md#no-such-heading)\n"},
        "a link outside the repository": {"README.md": readme + "\n[x](../outside.md)\n"},
        "a same-file anchor that is missing": {"README.md": readme + "\n[x](#no-such-heading)\n"},
        "a reference definition to a missing file": {"README.md": readme + "\n[x]: docs/gone.md\n"},
        "a duplicate heading's second anchor, with the heading once": {
            "README.md": readme + f"\n[x](docs/benchmarks.md#{slug(heading_text(heading))}-1)\n"},
        "a renamed heading that README.md links to": {
            "docs/benchmarks.md": bench.replace(linked_line, "## Renamed", 1)},
    }
    rust = next(f for f in rust_files(tree.root) if "docs/benchmarks.md" in tree.read(f))
    code = tree.read(rust)
    breakages.update({
        "a Rust comment naming a missing doc": {rust: code + "\n// docs/no-such-file.md\n"},
        "a Rust comment naming a missing anchor": {rust: code + "\n// docs/benchmarks.md#no-such-heading\n"},
        "a Rust comment quoting a missing section": {
            rust: code + "\n/// (docs/benchmarks.md, section\n/// \"No such section\")\n"},
    })
    breakages.update({
        "a missing script named in docs/benchmarks.md": {
            "docs/benchmarks.md": bench + "\n```sh\npython3 scripts/no_such_script.py --out $OUT\n```\n"},
        "a missing script in a code span of docs/benchmarks.md": {
            "docs/benchmarks.md": bench + "\n(`bash ../scripts/gone.sh`)\n"},
        "a lab command the lab does not have": {
            "docs/benchmarks.md": bench + "\n`python3 scripts/lab.py no-such-command`\n"},
    })
    missed = []
    before = check(root)[-1]
    for what, broken in breakages.items():
        problems = check(root, broken)[-1]
        if not set(problems) - set(before):
            missed.append(what)
    # The history keeps retired scripts' commands; another directory's scripts/ is not ours.
    history = "docs/benchmarks-history.md"
    allowed = {history: tree.read(history) + "\n`python3 scripts/no_such_script.py`\n",
               "docs/benchmarks.md": bench + "\n`gpufill-cli/scripts/x.sh`\n"}
    if set(check(root, allowed)[-1]) - set(before):
        missed.append("benchmarks-history.md's retired scripts and another directory's "
                      "scripts/ left alone")
    # A heading in a fenced block is no anchor, a link in a code span no link.
    fenced = "# Title\n\n```\n# not a heading\n[x](nowhere.md)\n```\n`[y](nowhere.md)`\n[z](#title)\n"
    if "not-a-heading" in anchors(fenced) or list(links(fenced)) != [(8, "#title")]:
        missed.append("code blocks and spans are not read as headings or links")
    expected = {"SM activity: `metric = \"sm\"` (`scripts/sm_check.py`)": "sm-activity-metric--sm-scriptssm_checkpy",
                "Launching from the loop's thread (issue 7's CPU goal)": "launching-from-the-loops-thread-issue-7s-cpu-goal",
                "A foreign PyTorch job — first look": "a-foreign-pytorch-job--first-look",
                "4096² matmuls, `spin_sleep`": "4096-matmuls-spin_sleep"}
    for title, anchor in expected.items():
        if slug(heading_text(title)) != anchor:
            missed.append(f"the anchor of {title!r} is {slug(heading_text(title))!r}, not {anchor!r}")
    if anchors("# A\n## A\n## A\n") != {"a", "a-1", "a-2"}:
        missed.append("duplicate headings do not get -1, -2")
    return missed


def main(argv):
    root = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    missed = self_test(root)
    for what in missed:
        print(f"FAIL self-test: not found: {what}")
    md_checked, rs_checked, cmd_checked, problems = check(root)
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        print(f"FAIL {len(problems)} broken of {md_checked} Markdown links, {rs_checked} "
              f"docs/ references in Rust comments and {cmd_checked} scripts/ paths and lab "
              "commands in docs/benchmarks.md")
    if missed or problems:
        return 1
    print(f"ok   {md_checked} relative Markdown links and {rs_checked} docs/ references in Rust "
          f"comments resolve, and the {cmd_checked} scripts/ paths and lab commands of "
          "docs/benchmarks.md exist (self-test: broken files, anchors, sections and commands "
          "are found)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
