//! Sets `GPUFILL_REVISION` for the compiler: the commit this is built from, as
//! `git rev-parse --short=12 HEAD` prints it; where that fails (no git, a source tarball,
//! a Docker build without `.git`), the `GPUFILL_REVISION` environment variable; else
//! `unknown`. `src/version.rs` exposes it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GPUFILL_REVISION");
    let revision = git(&["rev-parse", "--short=12", "HEAD"])
        .or_else(|| std::env::var("GPUFILL_REVISION").ok())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=GPUFILL_REVISION={revision}");
    // A commit or checkout changes HEAD, or the branch it names (a loose ref, or
    // packed-refs after `git gc`). Only files that exist are named: cargo reruns the
    // script on every build for a missing one.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        let path = git(&["rev-parse", "--git-path", &name])
            .map(PathBuf::from)
            .filter(|p| p.is_file());
        if let Some(path) = path {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The trimmed output of a successful `git` command.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| text.trim().to_owned())
}
