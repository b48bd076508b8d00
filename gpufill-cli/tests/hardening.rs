//! Hardening, round 3 (issue 31), end to end: a log that cannot vanish, reloads applied
//! whole or not at all, and the small ones (full streams, huge numbers, NUL bytes).

mod common;

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::metrics::{scrape, target};
use common::running::{Running, wait_within};
use common::{bin, dev_full};

#[test]
fn a_rust_log_that_is_not_understood_falls_back_to_the_flags_level_with_one_warning() {
    for rust_log in ["", "garbage"] {
        let out = bin()
            .args(["simulate", "--realtime", "--duration", "0.3"])
            .args(["--metrics", "127.0.0.1:0"])
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(
            stderr
                .matches("RUST_LOG not understood, logging at info")
                .count(),
            1,
            "RUST_LOG={rust_log:?}: {stderr}"
        );
        assert!(
            stderr.contains("metrics listening on http://"),
            "RUST_LOG={rust_log:?}: {stderr}"
        );
    }
}

/// The target gpufill holds, from its metrics.
fn target_in_force(port: u16) -> f64 {
    let text = scrape(port);
    target(&text).unwrap_or_else(|| panic!("no target in {text}"))
}

/// A config whose first part alone is valid TOML that sets a key (target 41), and whose
/// whole holds 70 all day but the last hour (a schedule window).
const HEAD: &str = "target_percent = 41\n";
const TAIL: &str = "[[schedule.window]]\nstart = \"00:00\"\nend = \"23:00\"\ntarget_percent = 70\n";

#[test]
fn a_writer_pausing_150_ms_between_two_writes_never_gets_its_half_file_applied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(&path, format!("{HEAD}{TAIL}")).unwrap();
    let mut g = Running::start(&[
        "simulate",
        "--realtime",
        "--duration",
        "60",
        "--start-time",
        "12:00",
        "--config",
        path.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    let port = g.metrics_port();
    // NaN until the first tick is published.
    let deadline = Instant::now() + Duration::from_secs(10);
    while target_in_force(port).is_nan() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(target_in_force(port), 70.0);
    for cycle in 1..=4 {
        // As the audit's writer: two writes 150 ms apart, a SIGHUP between them.
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(HEAD.as_bytes()).unwrap();
        g.signal("HUP");
        std::thread::sleep(Duration::from_millis(150));
        f.write_all(TAIL.as_bytes()).unwrap();
        drop(f);
        g.wait_for("config reloaded", cycle);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(target_in_force(port), 70.0, "cycle {cycle}: {:#?}", g.seen);
    }
}

#[test]
fn sigterm_while_a_reload_waits_for_its_writer_ends_gpufill_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(&path, HEAD).unwrap();
    let mut g = Running::start(&[
        "simulate",
        "--realtime",
        "--duration",
        "60",
        "--config",
        path.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    g.metrics_port();
    // A writer that keeps the file open and keeps writing: the reload waits.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (path, writing) = (path.clone(), Arc::clone(&writing));
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            while writing.load(Ordering::Relaxed) {
                f.write_all(b"# more\n").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    g.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    g.signal("TERM");
    let status = wait_within(&mut g.child, Duration::from_secs(5));
    let took = sent.elapsed();
    writing.store(false, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_millis(700), "exit took {took:?}");
}

#[test]
fn help_and_version_into_a_full_stdout_exit_1_saying_so() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["run", "--help"],
        &["help", "run"],
    ] {
        let out = bin().args(args).stdout(dev_full()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("gpufill: cannot write to standard output: "),
            "{args:?}: {stderr}"
        );
    }
    // Into a pipe whose reader has gone (`| head -1`) is no failure.
    let mut child = bin().arg("--help").stdout(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_number_too_large_for_a_float_is_out_of_range_not_infinity() {
    let digits = "1".repeat(100_000);
    for (args, flag) in [
        (vec!["simulate", "--target", &digits], "--target <PCT>"),
        (vec!["run", "--duration", "1e400"], "--duration <SECS>"),
        (vec!["simulate", "--max-duty", "-1e999"], "--max-duty <PCT>"),
        (
            vec!["bench", "--sim", "--targets", "5,1e999"],
            "--targets <LIST>",
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("' for '{flag}': out of range: ")),
            "{stderr}"
        );
        assert!(!stderr.contains("got inf"), "{stderr}");
        assert!(stderr.len() < 300, "the value is shortened: {stderr}");
    }
    let out = bin()
        .args(["simulate", "--target", &digits])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(
            "gpufill: invalid value '111111111111111111111111... (100000 characters)' for \
             '--target <PCT>': out of range: above 1.8e308"
        ),
        "{stderr}"
    );
}

#[test]
fn a_nul_byte_in_a_config_is_named_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(&path, "target_percent = 40\n\0\n").unwrap();
    let out = bin().args(["config", "check"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "gpufill: {}:2:1: a NUL byte (\\0): a config is text, and TOML allows it nowhere",
            path.display()
        )
    );
}
