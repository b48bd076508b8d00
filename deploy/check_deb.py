#!/usr/bin/env python3
"""Checks what `cargo deb -p gpufill-cli` built, from dpkg-deb's listings in DIR.

deploy/check.sh writes DIR/deb-info.txt (dpkg-deb --info), deb-contents.txt
(--contents), deb-conffiles.txt and deb-gpufill.service (the unit inside the package),
then runs this; exits 1 naming each problem.
"""
import re
import sys
from pathlib import Path

# Path inside the package -> mode it must have.
FILES = {
    "usr/bin/gpufill": "-rwxr-xr-x",
    "usr/lib/systemd/system/gpufill.service": "-rw-r--r--",
    "etc/gpufill/gpufill.toml": "-rw-r--r--",
    "usr/share/doc/gpufill/copyright": "-rw-r--r--",
    "usr/share/doc/gpufill/operations.md": "-rw-r--r--",
    "usr/share/doc/gpufill/CHANGELOG.md": "-rw-r--r--",
    "usr/share/doc/gpufill/examples/mps.conf": "-rw-r--r--",
}


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


def main():
    found = list(problems(Path(sys.argv[1])))
    for p in found:
        print(f"FAIL .deb: {p}")
    if found:
        return 1
    print(f"ok   .deb: {', '.join(FILES)} with their modes; conffile; unit starts /usr/bin/gpufill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
