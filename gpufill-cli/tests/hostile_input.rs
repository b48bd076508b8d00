//! Inputs a new user or a hostile neighbour might give: each gets exit 2 and a line
//! saying where and why, or is handled, and none panics or hangs (issue "Nothing a user,
//! a neighbour or a fault does can stall it, crash it or switch its yielding off").

mod common;

use std::io::Read;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use common::running::signal;
use common::{bin, gpufill};
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `gpufill args...` exits 2 with `expected` on stderr.
fn usage_error(args: &[&str], expected: &str) {
    gpufill()
        .args(args)
        .assert()
        .code(2)
        .stderr(contains(expected));
}

/// `config check` on a file holding `text` exits 2 with `expected` on stderr.
fn refused(dir: &tempfile::TempDir, text: &str, expected: &str) {
    let path = file(dir, "t.toml", text);
    gpufill()
        .args(["config", "check"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains(expected));
}

#[test]
fn huge_numbers_are_refused_with_exit_2_not_a_panic() {
    for (args, message) in [
        (
            &["simulate", "--foreign", "0-1e20:30"][..],
            "END must be at most 2592000 seconds",
        ),
        (&["simulate", "--every", "1e20"], "--every must be"),
        (&["run", "--duration", "1e20"], "--duration must be"),
        (
            &["simulate", "--random-foreign", "1000000"],
            "--random-foreign must be between 0 and 3600",
        ),
    ] {
        gpufill()
            .args(args)
            .timeout(Duration::from_secs(20))
            .assert()
            .code(2)
            .stderr(contains(message))
            .stderr(contains("panicked").not());
    }
}

#[test]
fn negative_numbers_reach_the_range_check_and_name_the_flag() {
    usage_error(
        &["simulate", "--target", "-5"],
        "invalid --target: target_percent: must be between 0 and 100, got -5",
    );
}

#[test]
fn a_zero_duration_says_it_must_be_more_than_zero() {
    usage_error(
        &["simulate", "--duration", "0"],
        "--duration must be more than 0",
    );
}

#[test]
fn a_tick_that_does_not_divide_the_period_blames_the_flag_given() {
    usage_error(
        &["simulate", "--tick-ms", "20", "--duration", "1"],
        "invalid --tick-ms: tick_ms: must divide load.period_ms",
    );
    // With the period flag the README's pair works.
    gpufill()
        .args([
            "simulate",
            "--tick-ms",
            "20",
            "--period-ms",
            "20",
            "--duration",
            "1",
        ])
        .assert()
        .success();
}

#[test]
fn a_relation_between_keys_blames_the_key_the_file_has() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "tick_ms = 49\n",
            "t.toml:1:11: tick_ms: must divide load.period_ms (50 ms)",
        ),
        (
            "[probe]\nretry_initial_s = 500\n",
            "t.toml:2:19: probe.retry_initial_s: must be at most probe.retry_max_s (300), got 500",
        ),
    ] {
        refused(&dir, text, expected);
    }
}

#[test]
fn wrong_types_and_duplicates_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "[yield]\nmps = true\n",
            "t.toml:2:7: yield.mps: expected \"auto\", \"on\" or \"off\", got true",
        ),
        (
            "tick_ms = 5\ntick_ms = 6\n",
            "t.toml:2:1: duplicate key `tick_ms`",
        ),
        ("[load]\n[load]\n", "t.toml:2:2: duplicate key `load`"),
    ] {
        refused(&dir, text, expected);
    }
}

#[test]
fn bench_refuses_all_as_one_gpu_with_a_reason() {
    usage_error(&["bench", "--gpu", "all"], "bench measures one GPU");
}

#[test]
fn a_fifo_or_a_device_as_config_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    let made = StdCommand::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for path in [fifo.as_path(), std::path::Path::new("/dev/zero")] {
        let started = Instant::now();
        gpufill()
            .args(["config", "check"])
            .arg(path)
            .timeout(Duration::from_secs(10))
            .assert()
            .code(2)
            .stderr(contains("not a regular file"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path:?} blocked"
        );
    }
}

#[test]
fn an_oversized_config_is_refused_without_reading_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "big.toml", &"#".repeat(2 << 20));
    gpufill()
        .args(["config", "check"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("larger than 1048576 bytes"));
}

#[test]
fn a_full_disk_on_stdout_is_an_error_not_a_panic() {
    // Linux's full device: a test that cannot run here fails rather than pass.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux's full device) to write to");
    let out = bin()
        .args(["config", "check"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_reader_that_goes_away_is_not_a_failure() {
    for _ in 0..10 {
        let mut child = bin()
            .args(["config", "check"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // like `| head -n 0`
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(status.code(), Some(0), "{stderr}");
    }
}

#[test]
fn sighup_without_a_config_file_does_not_kill_simulate() {
    let mut child = bin()
        .args(["simulate", "--realtime", "--duration", "3", "--every", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    signal(&child, "HUP");
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("no --config file, nothing to reload"),
        "{stderr}"
    );
}
