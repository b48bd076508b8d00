//! Helpers shared by the tests on a GPU (`hardware.rs`) and on the stand-in libcuda
//! (`fake_driver.rs`).

#![allow(dead_code)] // each test file uses its own part

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gpufill_core::{Duty, Load, LoadSource, Time, Width};
use gpufill_cuda::{CudaLoad, LauncherSettings};

pub const MS: Duration = Duration::from_millis(1);
pub const US: Duration = Duration::from_micros(1);

pub fn load(duty: f64) -> Load {
    Load {
        duty: Duty::clamped(duty),
        width: Width::ONE_WARP,
    }
}

pub fn open(settings: LauncherSettings) -> (CudaLoad, Duration) {
    let t = Instant::now();
    let gpu = CudaLoad::open(0, settings).expect("open GPU 0");
    (gpu, t.elapsed())
}

/// The launcher with a 20 ms period, bursts split into 2 ms kernels and one 500 us
/// kernel at a time beside holders: the mechanics most tests here check (the defaults
/// are a 50 ms period, one kernel a burst, and bursts beside holders too), driven at
/// 20 ms ticks below.
pub fn twenty_ms() -> LauncherSettings {
    LauncherSettings {
        period: 20 * MS,
        max_kernel: 2 * MS,
        beside_kernel: Some(500 * US),
        ..LauncherSettings::default()
    }
}

/// With the stand-in libcuda (`tests/fake-libcuda/fake.c`), the most of our kernels
/// ever queued at once since the last open, as `(by the opening thread, by any other
/// thread)`, which it reports in the device name; `None` on a real GPU.
pub fn fake_queue_depths() -> Option<(u32, u32)> {
    let name = gpufill_cuda::devices().ok()?.first()?.name.clone();
    let rest = name.strip_prefix("Fake GPU (queued: ")?;
    let mut numbers = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().ok());
    Some((numbers.next()??, numbers.next()??))
}

pub fn on_the_fake() -> bool {
    gpufill_cuda::devices().is_ok_and(|d| d.first().is_some_and(|d| d.name.starts_with("Fake GPU")))
}

/// Sets the idle load and times how long until none of our kernels runs.
pub fn stop_and_time(gpu: &mut CudaLoad) -> Duration {
    let t = Instant::now();
    gpu.set_load(Time::ZERO, Load::IDLE).unwrap();
    assert!(gpu.quiesce(Duration::from_secs(1)));
    t.elapsed()
}

/// Set in the child that runs on the stand-in libcuda.
const ON_THE_FAKE: &str = "GPUFILL_TEST_ON_THE_FAKE";

/// Runs `body` on the stand-in libcuda, on every machine: the test binary runs itself,
/// only the test `name` selected, with `tests/fake-libcuda/fake.c` built (with `cc`, the
/// linker cargo uses) into a directory that `LD_LIBRARY_PATH` names. The loader searches
/// that path before its cache and the system directories, so the stand-in is found first
/// where a driver is installed too; the child checks that it was. Panics if the child
/// fails or runs anything but that one test.
pub fn on_the_stand_in(name: &str, body: impl FnOnce()) {
    if std::env::var_os(ON_THE_FAKE).is_some() {
        assert!(on_the_fake(), "the stand-in libcuda was not the one loaded");
        body();
        return;
    }
    let dir = tempfile_dir(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-libcuda/fake.c");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(source)
        .arg("-lpthread")
        .output()
        .expect("cc, the linker cargo uses, runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", &dir)
        .env(ON_THE_FAKE, "1")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} on the stand-in libcuda:\n{stdout}{stderr}"
    );
}

/// A new directory of this process's own for the test `name` (tests run in parallel).
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpufill-fake-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
