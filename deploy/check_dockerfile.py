#!/usr/bin/env python3
"""Offline checks of deploy/docker/Dockerfile beyond hadolint; run by deploy/check.sh.

- Every FROM names its image by digest (`@sha256:` and 64 hex digits).
- The final stage's labels org.opencontainers.image.base.name and .base.digest name the
  runtime image of its FROM line, digest included.
- VERSION has no default, and the build compares it with Cargo's version (`cargo pkgid`).
- Dependency caching: the manifests of every workspace member and Cargo.lock are copied,
  and `cargo build` runs over deploy/docker/stub-crates.sh's empty sources, before
  `COPY . .`; after it the workspace's crates are cleaned and built from the sources.
- The dependency stage works: stub-crates.sh, run beside the copied manifests in a
  temporary directory, leaves a workspace that `cargo check --offline --locked`
  accepts (every declared target exists), and every file it writes exists in the
  repository (so `COPY . .` replaces it).
A self-test breaks copies of the Dockerfile and expects each break to be found.
Usage: check_dockerfile.py  (exits 1 naming each problem)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCKERFILE = os.path.join(ROOT, "deploy", "docker", "Dockerfile")
STUB_SCRIPT = "deploy/docker/stub-crates.sh"


def instructions(text):
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments out."""
    out, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        current = ""
    return out


def members():
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["workspace"]["members"]


def problems(text):
    found = []
    ins = instructions(text)
    froms = [(i, args) for i, (word, args) in enumerate(ins) if word == "FROM"]
    stages = set()
    for _, args in froms:
        image = args.split()[0]
        if " AS " in args.upper():
            stages.add(args.split()[-1])
        if image not in stages and not re.search(r"@sha256:[0-9a-f]{64}$", image):
            found.append(f"FROM {image}: not pinned by digest (@sha256:...)")
    if not froms:
        return ["no FROM"]
    final_at, final = froms[-1]
    final_image = final.split()[0]
    name, _, digest = final_image.partition("@")
    labels = " ".join(args for word, args in ins[final_at:] if word == "LABEL")
    for key, want in (("base.name", name), ("base.digest", digest)):
        m = re.search(rf'org\.opencontainers\.image\.{re.escape(key)}="([^"]*)"', labels)
        if not m:
            found.append(f"the final stage has no label org.opencontainers.image.{key}")
        elif m.group(1) != want:
            found.append(f"label org.opencontainers.image.{key} is {m.group(1)!r}, the final FROM's is {want!r}")
    final_ins = ins[final_at:]
    if not any(w == "HEALTHCHECK" and re.search(r'"healthcheck"\s*\]', a) for w, a in final_ins):
        found.append("the final stage has no HEALTHCHECK running `gpufill healthcheck`")
    served = re.search(r"\bGPUFILL_METRICS=(\S+)", " ".join(a for w, a in final_ins if w == "ENV"))
    for port in " ".join(a for w, a in final_ins if w == "EXPOSE").split():
        if not served or not served.group(1).endswith(":" + port.split("/")[0]):
            found.append(f"EXPOSE {port}, but the default command serves no metrics there (ENV GPUFILL_METRICS)")
    if "example.invalid" in text:
        found.append("a placeholder URL (example.invalid): name the project's real home or leave it out")
    # The examples in comments publish the metrics port on loopback only, as
    # docs/operations.md advises: `-p 9401:9401` would publish it on every interface.
    for published in re.findall(r"^#.*\s-p\s+((?:\S+:)?\d+:\d+)", text, re.M):
        if not published.startswith("127.0.0.1:"):
            found.append(f"an example publishes -p {published} on every interface: publish on 127.0.0.1")
    for word, args in ins:
        if word == "ARG" and re.match(r"VERSION=", args):
            found.append(f"ARG {args}: VERSION must have no default (it is Cargo's, checked in the build)")
    build = ins[froms[0][0]:final_at]
    runs = [(i, args) for i, (word, args) in enumerate(build) if word == "RUN"]
    if not any("cargo pkgid" in a and "VERSION" in a for _, a in runs):
        found.append("the build does not compare VERSION with Cargo's (cargo pkgid)")
    copy_all = next((i for i, (word, args) in enumerate(build) if word == "COPY" and args == ". ."), None)
    deps = next((i for i, a in runs if "stub-crates.sh" in a and "cargo build" in a), None)
    if copy_all is None or deps is None or deps > copy_all:
        found.append("no dependency layer: `RUN stub-crates.sh && cargo build ...` must come before `COPY . .`")
        return found
    args_before = [a for word, a in build[1:deps] if word == "ARG"]
    if args_before:
        found.append(f"ARG {', '.join(args_before)} before the dependency build: a new value rebuilds it")
    copied = " ".join(args for word, args in build[:deps] if word == "COPY")
    for path in ["Cargo.toml", "Cargo.lock", STUB_SCRIPT] + [f"{m}/Cargo.toml" for m in members()]:
        if not re.search(rf"(^|\s){re.escape(path)}(\s|$)", copied):
            found.append(f"{path} is not copied before the dependency build")
    after = " ".join(a for i, a in runs if i > copy_all)
    clean = re.search(r"cargo clean [^&]*", after)
    for m in members():
        package = "gpufill-bench" if m == "benches" else m
        if package != "gpufill-bench" and not (clean and f"-p {package}" in clean.group(0)):
            found.append(f"after COPY . ., {package} (built from empty sources) is not cleaned")
    return found


def copied_files(text):
    """(source, destination) of the COPY lines before the dependency build."""
    pairs = []
    for word, args in instructions(text):
        if word == "COPY" and args == ". .":
            break
        if word == "COPY" and not args.startswith("--from"):
            *sources, dest = args.split()
            pairs += [(s, dest) for s in sources]
    return pairs


def emulate(text, script):
    """Runs `script` (the dependency stage's stub script) beside the copied manifests;
    problems."""
    found = []
    with tempfile.TemporaryDirectory() as work, tempfile.NamedTemporaryFile("w", suffix=".sh") as stub:
        stub.write(script)
        stub.flush()
        for source, dest in copied_files(text):
            if dest.startswith("/"):
                continue  # the script itself, run from the repository below
            target = os.path.join(work, dest, os.path.basename(source)) if dest.endswith("/") else os.path.join(work, dest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy(os.path.join(ROOT, source), target)
        before = set()
        for d, _, names in os.walk(work):
            before |= {os.path.relpath(os.path.join(d, n), work) for n in names}
        subprocess.run(["sh", stub.name], cwd=work, check=True)
        written = set()
        for d, _, names in os.walk(work):
            written |= {os.path.relpath(os.path.join(d, n), work) for n in names}
        for path in sorted(written - before):
            if not os.path.exists(os.path.join(ROOT, path)):
                found.append(f"{STUB_SCRIPT} writes {path}, which the repository lacks: COPY . . would leave it")
        # `cargo check` of the smallest member loads every member's targets (cargo
        # metadata does not look for their files) and resolves from the lock file.
        target_dir = os.path.join(ROOT, "target", "deploy-check", "stub-target")
        r = subprocess.run(["cargo", "check", "--quiet", "--offline", "--locked", "-p", "gpufill-core",
                            "--target-dir", target_dir], cwd=work, capture_output=True, text=True)
        if r.returncode != 0:
            found.append(f"the dependency stage's workspace fails `cargo check`: {r.stderr.strip()[-400:]}")
    return found


def breakages(text):
    digest = re.search(r"@sha256:([0-9a-f]{64})", text).group(1)
    final_digest = re.findall(r"^FROM \S+@sha256:([0-9a-f]{64})", text, re.M)[-1]
    return {
        "a FROM by tag only": text.replace(f"@sha256:{digest}", "", 1),
        "a base.digest label of another image": text.replace(f'base.digest="sha256:{final_digest}"',
                                                            f'base.digest="sha256:{digest[::-1]}"'),
        "a hand-written VERSION": text.replace("\nARG VERSION\n", "\nARG VERSION=0.1.0\n", 1),
        "COPY . . before the dependency build": text.replace("COPY Cargo.toml Cargo.lock ./", "COPY . .", 1),
        "a member's manifest not copied": text.replace("COPY gpufill-nvml/Cargo.toml gpufill-nvml/\n", ""),
        "an ARG above the dependency build": text.replace("SHELL [", "ARG REVISION\nSHELL [", 1),
        "no HEALTHCHECK": re.sub(r"HEALTHCHECK [^\n]*\\\n[^\n]*\n", "", text),
        "EXPOSE without metrics served by default": text.replace("ENV GPUFILL_METRICS=0.0.0.0:9401\n", ""),
        "an example publishing on every interface": text.replace("-p 127.0.0.1:9401:9401", "-p 9401:9401", 1),
        "a placeholder URL": text.replace('image.title="gpufill"', 'image.title="gpufill" org.opencontainers.image.url="https://example.invalid/x"', 1),
    }


def main():
    with open(DOCKERFILE) as f:
        text = f.read()
    with open(os.path.join(ROOT, STUB_SCRIPT)) as f:
        script = f.read()
    found = problems(text)
    if not found:
        found = emulate(text, script)
        missing_example = script.replace(" gpufill-runtime/examples/fill_gpu0.rs", "")
        if missing_example == script or not emulate(text, missing_example):
            found.append("self-test: a stub script that leaves out a declared example passed")
    for what, broken in breakages(text).items():
        if broken == text:
            found.append(f"self-test: the breakage '{what}' changed nothing")
        elif not problems(broken):
            found.append(f"self-test: a Dockerfile with {what} passed")
    for p in found:
        print(f"FAIL deploy/docker/Dockerfile: {p}")
    if found:
        return 1
    print("ok   deploy/docker/Dockerfile: every FROM by digest, base.name and base.digest labels match the "
          "runtime image, VERSION checked against Cargo, a HEALTHCHECK by `gpufill healthcheck`, metrics served on the "
          "EXPOSEd port by default, examples publish on 127.0.0.1 only, no placeholder URL, dependencies built before COPY . . (the stub workspace "
          f"passes cargo check), and {len(breakages(text))} broken copies and a broken stub script fail")
    return 0


if __name__ == "__main__":
    sys.exit(main())
