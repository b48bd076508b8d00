//! `gpufill status` reads NVML only: it works where libcuda is missing (a container
//! given only the `utility` driver capability), against a stand-in NVML library.

use std::path::Path;
use std::process::Command;

/// Builds `tests/fake-nvml/fake_nvml.c` as `dir/libnvidia-ml.so.1` with `cc`, the
/// linker cargo itself uses on Linux.
fn build_fake_nvml(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-nvml/fake_nvml.c");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libnvidia-ml.so.1"))
        .arg(source)
        .output()
        .expect("cc, the linker cargo uses, runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn status_needs_nvml_only_not_libcuda() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_nvml(dir.path());
    // Only the stand-in NVML is on the library path: on a machine without the driver
    // there is no libcuda to find.
    let out = Command::new(assert_cmd::cargo::cargo_bin("gpufill"))
        .arg("status")
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("driver 999.99.99-fake, 0 GPU(s)\n"),
        "{stdout}"
    );
}

#[test]
fn status_into_a_full_disk_says_what_it_could_not_write_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_nvml(dir.path());
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(assert_cmd::cargo::cargo_bin("gpufill"))
        .arg("status")
        .env("LD_LIBRARY_PATH", dir.path())
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("gpufill: cannot write to standard output: "),
        "{stderr}"
    );
}
