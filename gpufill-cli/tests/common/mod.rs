//! Helpers shared by the binary's end-to-end tests.

#![allow(dead_code)] // each test file uses its own part

pub mod metrics;
pub mod running;

use std::fs::File;
use std::path::Path;

use assert_cmd::Command;
use assert_cmd::cargo::CommandCargoExt;

/// The default loop tick, seconds: `simulate` and `bench` write one CSV row per tick.
pub fn tick_s() -> f64 {
    gpufill_runtime::Settings::default().tick().as_secs_f64()
}

/// How many default ticks fit in `seconds`.
pub fn ticks_in(seconds: f64) -> usize {
    (seconds / tick_s()).round() as usize
}

/// The `gpufill` binary under test.
pub fn gpufill() -> Command {
    Command::cargo_bin("gpufill").unwrap()
}

/// The `gpufill` binary as a std `Command`, for a test that spawns it, holds its pipes or
/// signals it. Its log is plain (`NO_COLOR`) at the flags' level whatever `RUST_LOG` the
/// test runs under, and `NODE_NAME` fixes the metrics' `Hostname` label ([`metrics::LABELS`]).
pub fn bin() -> std::process::Command {
    let mut cmd = std::process::Command::cargo_bin("gpufill").unwrap();
    cmd.env("NO_COLOR", "1")
        .env("NODE_NAME", "test-node")
        .env_remove("RUST_LOG");
    cmd
}

/// The NVIDIA driver hidden, so that a test of what gpufill does without one runs on a
/// machine with one too: `gpufill-cuda/tests/no-driver/no_driver.c`, built here with `cc`
/// (the linker cargo itself uses) and preloaded, makes every `dlopen` of libcuda and
/// libnvidia-ml fail as a missing library does.
pub struct NoDriver {
    preload: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl NoDriver {
    /// Builds the preload library.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let preload = dir.path().join("no_driver.so");
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../gpufill-cuda/tests/no-driver/no_driver.c");
        build_shared(&source, &preload, &["-ldl"]);
        NoDriver { preload, _dir: dir }
    }

    /// The `gpufill` binary under test, with the driver hidden from it.
    pub fn gpufill(&self) -> Command {
        let mut cmd = gpufill();
        cmd.env("LD_PRELOAD", &self.preload);
        cmd
    }
}

/// Builds the C file `source` into the shared library `out` with `cc`, the linker cargo
/// itself uses on Linux, linking `libs`.
pub fn build_shared(source: &Path, out: &Path, libs: &[&str]) {
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(source)
        .args(libs)
        .output()
        .expect("cc, the linker cargo uses, runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// `/dev/full` opened for writing: every write fails with ENOSPC.
pub fn dev_full() -> File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// One row of the `t_s,target,util,duty,state` CSV that `simulate --csv` and `bench` write.
pub struct Row {
    pub t: f64,
    pub target: f64,
    /// Empty in the file when no new sample arrived in that tick.
    pub util: Option<f64>,
    pub duty: f64,
    pub state: String,
}

/// Reads such a CSV, checking its header and that every row has five fields.
pub fn read_csv(path: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("t_s,target,util,duty,state"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 5, "{l}");
            Row {
                t: f[0].parse().unwrap(),
                target: f[1].parse().unwrap(),
                util: f[2].parse().ok(),
                duty: f[3].parse().unwrap(),
                state: f[4].to_string(),
            }
        })
        .collect()
}
