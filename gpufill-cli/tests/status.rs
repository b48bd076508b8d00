//! `gpufill status` reads NVML only: it works where libcuda is missing (a container
//! given only the `utility` driver capability), against a stand-in NVML library.

mod common;

use std::path::Path;
use std::process::Command;

use common::{bin, build_shared, dev_full};

/// Builds `tests/fake-nvml/fake_nvml.c` as `dir/libnvidia-ml.so.1`.
fn build_fake_nvml(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-nvml/fake_nvml.c");
    build_shared(&source, &dir.join("libnvidia-ml.so.1"), &[]);
}

#[test]
fn status_needs_nvml_only_not_libcuda() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_nvml(dir.path());
    // Only the stand-in NVML is on the library path: on a machine without the driver
    // there is no libcuda to find.
    let out = bin()
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

/// `gpufill status --json` against the stand-in NVML, with `CUDA_MPS_PIPE_DIRECTORY`
/// set to `pipe`.
fn status_json(nvml: &Path, pipe: &Path) -> serde_json::Value {
    let out = bin()
        .args(["status", "--json"])
        .env("LD_LIBRARY_PATH", nvml)
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn status_says_whether_an_mps_daemon_runs_as_json_and_as_text() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_nvml(dir.path());
    let pipe = dir.path().join("pipe");
    std::fs::create_dir(&pipe).unwrap();
    let status = status_json(dir.path(), &pipe);
    assert_eq!(status["driver"], "999.99.99-fake");
    assert_eq!(status["gpus"], serde_json::json!([]));
    assert_eq!(status["mps"]["daemon"], "absent");
    assert_eq!(status["mps"]["pipe_directory"], pipe.to_str().unwrap());

    // A stand-in daemon: its endpoint, and a process named as the daemon in its PID file.
    let _endpoint = std::os::unix::net::UnixListener::bind(pipe.join("control")).unwrap();
    let control = dir.path().join("nvidia-cuda-mps-control");
    std::fs::copy("/bin/sleep", &control).unwrap();
    let mut daemon = Command::new(&control).arg("30").spawn().unwrap();
    // Until it has executed the copy, the child still shows the test's name.
    let comm = format!("/proc/{}/comm", daemon.id());
    for _ in 0..200 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.starts_with("nvidia-cuda-mps")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::write(
        pipe.join("nvidia-cuda-mps-control.pid"),
        daemon.id().to_string(),
    )
    .unwrap();
    let running = status_json(dir.path(), &pipe);
    let text = bin()
        .arg("status")
        .env("LD_LIBRARY_PATH", dir.path())
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .output()
        .unwrap();
    // As the daemon stops: its PID file goes, its endpoint stays.
    let _ = daemon.kill();
    let _ = daemon.wait();
    std::fs::remove_file(pipe.join("nvidia-cuda-mps-control.pid")).unwrap();
    let stopped = status_json(dir.path(), &pipe);
    assert_eq!(running["mps"]["daemon"], "running");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("MPS: a control daemon runs (")
            && text.contains("its clients (marked) share the SMs"),
        "{text}"
    );
    assert_eq!(stopped["mps"]["daemon"], "absent");
}

#[test]
fn status_into_a_full_disk_says_what_it_could_not_write_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_nvml(dir.path());
    // The table and the JSON alike.
    for args in [&["status"][..], &["status", "--json"]] {
        let out = bin()
            .args(args)
            .env("LD_LIBRARY_PATH", dir.path())
            .stdout(dev_full())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("gpufill: cannot write to standard output: "),
            "{args:?}: {stderr}"
        );
    }
}
