#!/usr/bin/env python3
"""Checks what `cargo deb -p gpufill-cli` built, from dpkg-deb's listings in DIR.

deploy/check.sh writes DIR/deb-info.txt (dpkg-deb --info), deb-contents.txt
(--contents), deb-conffiles.txt, deb-gpufill.service (the unit inside the package) and
deb-changelog.txt (its changelog, unzipped), then runs this; exits 1 naming each problem.
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Path inside the package -> mode it must have.
FILES = {
    "usr/bin/gpufill": "-rwxr-xr-x",
    "usr/lib/systemd/system/gpufill.service": "-rw-r--r--",
    "etc/gpufill/gpufill.toml": "-rw-r--r--",
    "usr/share/doc/gpufill/copyright": "-rw-r--r--",
    "usr/share/doc/gpufill/operations.md": "-rw-r--r--",
    "usr/share/doc/gpufill/CHANGELOG.md": "-rw-r--r--",
    "usr/share/doc/gpufill/changelog.gz": "-rw-r--r--",
    "usr/share/doc/gpufill/examples/mps.conf": "-rw-r--r--",
    "usr/share/man/man1/gpufill.1.gz": "-rw-r--r--",
    "usr/share/man/man1/gpufill-run.1.gz": "-rw-r--r--",
    "usr/share/bash-completion/completions/gpufill": "-rw-r--r--",
    "usr/share/zsh/vendor-completions/_gpufill": "-rw-r--r--",
    "usr/share/fish/vendor_completions.d/gpufill.fish": "-rw-r--r--",
}


def cargo_description():
    with open(ROOT / "gpufill-cli" / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["description"]


# Addresses that reach no one (RFC 2606's example domains and .invalid): a Maintainer
# or changelog signature must name the project's own.
PLACEHOLDER = re.compile(r"@(?:[\w.-]+\.)?(?:example\.(?:com|net|org)|[\w-]+\.invalid)>", re.I)


def cargo_authors():
    with open(ROOT / "gpufill-cli" / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["authors"]


def problems(d: Path):
    contents = {}
    for line in (d / "deb-contents.txt").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6:
            contents[fields[-1].removeprefix("./")] = fields[0]
    for path, mode in FILES.items():
        if path not in contents:
            yield f"{path} is missing"
        elif contents[path] != mode:
            yield f"{path} has mode {contents[path]}, not {mode}"
    owners = {line.split()[1] for line in (d / "deb-contents.txt").read_text().splitlines() if line}
    if owners != {"0/0"}:
        yield f"files owned by {owners}, not root"
    info = (d / "deb-info.txt").read_text()
    for field in ("Package: gpufill", "Depends: libc6", "Section: utils", "Maintainer: "):
        if not re.search(rf"^ {re.escape(field)}", info, re.M):
            yield f"control has no '{field}'"
    if "/etc/gpufill/gpufill.toml" not in (d / "deb-conffiles.txt").read_text().split():
        yield "/etc/gpufill/gpufill.toml is not a conffile (an upgrade would overwrite it)"
    unit = (d / "deb-gpufill.service").read_text()
    if not re.search(r"^ExecStart=/usr/bin/gpufill run ", unit, re.M):
        yield "the packaged unit does not start /usr/bin/gpufill"
    if "/usr/local/" in unit:
        yield "the packaged unit names /usr/local/"
    # The synopsis is the Cargo description on one line (cargo-deb wraps it at 79
    # characters, and the rest would become the long description's first line).
    m = re.search(r"^ Description: (.*)\n((?:  .*\n)*)", info, re.M)
    if not m:
        yield "control has no Description"
    else:
        want = cargo_description()
        if m.group(1) != want:
            yield f"the Description synopsis is {m.group(1)!r}, not gpufill-cli's whole description {want!r}"
        if not m.group(2).startswith("  gpufill holds"):
            yield "the long Description does not start with gpufill-cli's extended-description"
    # The Maintainer is gpufill-cli's first author, no placeholder, and signs the changelog.
    maintainer = re.search(r"^ Maintainer: (.*)$", info, re.M)
    signature = re.search(r"^ -- (.+?>)  ", (d / "deb-changelog.txt").read_text(), re.M)
    if maintainer:
        if PLACEHOLDER.search(maintainer.group(1)):
            yield f"Maintainer {maintainer.group(1)!r} is a placeholder: name the project's own (Cargo.toml authors)"
        if maintainer.group(1) != cargo_authors()[0]:
            yield f"Maintainer {maintainer.group(1)!r} is not gpufill-cli's first author {cargo_authors()[0]!r}"
        if not signature or signature.group(1) != maintainer.group(1):
            yield (f"the changelog's latest entry is signed {signature and signature.group(1)!r}, "
                   f"not by the Maintainer {maintainer.group(1)!r}")
    # The changelog's latest entry is this version.
    version = re.search(r"^ Version: (\S+)", info, re.M)
    top = re.match(r"gpufill \(([^)]+)\) ", (d / "deb-changelog.txt").read_text())
    if not version or not top or top.group(1) != version.group(1):
        yield (f"the changelog's latest entry is {top and top.group(1)}, the package {version and version.group(1)}: "
               "add an entry to deploy/debian/changelog")


def main():
    found = list(problems(Path(sys.argv[1])))
    for p in found:
        print(f"FAIL .deb: {p}")
    if found:
        return 1
    print(f"ok   .deb: {', '.join(FILES)} with their modes; conffile; unit starts /usr/bin/gpufill; "
          "one-line synopsis; the Maintainer is Cargo's first author, no placeholder, and signs the changelog "
          "of this version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
