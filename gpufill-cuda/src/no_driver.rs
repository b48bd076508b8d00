//! Runs a test with the NVIDIA driver hidden, so that a test of what this crate does
//! without a driver runs on every machine, one with a driver too, instead of returning
//! early there and counting as passed.
//!
//! The test binary runs itself, that one test selected, with `tests/no-driver/no_driver.c`
//! preloaded: every `dlopen` of libcuda then fails as a missing library does. A library
//! path without libcuda would not hide it (the loader also searches its cache and the
//! system directories); the C file's header says more.

use std::path::Path;
use std::process::Command;

/// Set in the child, where the driver is hidden.
const HIDDEN: &str = "GPUFILL_TEST_DRIVER_HIDDEN";

/// Runs `body` with the driver hidden: in a child that runs only the test `name` (its
/// path as the test harness prints it, e.g. `device::tests::some_test`), where `body`
/// runs after checking that the driver is indeed hidden. Panics if the child fails or
/// runs anything but that one test.
pub(crate) fn without_a_driver(name: &str, body: impl FnOnce()) {
    if std::env::var_os(HIDDEN).is_some() {
        assert!(
            !crate::driver_present(),
            "libcuda is still loadable with the driver hidden"
        );
        body();
        return;
    }
    // A directory of its own for each test: tests run in parallel.
    let dir = std::env::temp_dir().join(format!(
        "gpufill-no-driver-{}-{}",
        std::process::id(),
        name.replace("::", "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let preload = build(&dir);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--include-ignored", "--test-threads=1"])
        .env("LD_PRELOAD", preload)
        .env(HIDDEN, "1")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} with the driver hidden:\n{stdout}{stderr}"
    );
}

/// Builds the preload library into `dir` with `cc`, the linker cargo itself uses on
/// Linux.
fn build(dir: &Path) -> std::path::PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/no-driver/no_driver.c");
    let lib = dir.join("no_driver.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(source)
        .arg("-ldl")
        .output()
        .expect("cc, the linker cargo uses, runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}
