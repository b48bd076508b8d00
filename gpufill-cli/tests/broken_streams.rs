//! Streams that cannot be written and signals at awkward times (issue 22): none gives
//! exit 101 (a panic), and `simulate` stops when nobody reads its table.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::running::{signal, wait_within};
use common::{bin, dev_full};

#[test]
fn a_stderr_that_cannot_be_written_never_gives_exit_101() {
    for (args, code) in [
        (&["simulate", "--target", "500"][..], 2),
        (&["config", "check", "/nonexistent/gpufill.toml"], 2),
        (&["--bogus-flag"], 2),
        (
            &[
                "simulate",
                "--realtime",
                "--duration",
                "0.5",
                "--metrics",
                "127.0.0.1:0",
            ],
            0,
        ),
        (&["-v", "simulate", "--duration", "5"], 0),
    ] {
        let status = bin()
            .args(args)
            .stdout(Stdio::null())
            .stderr(dev_full())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{args:?}");
    }
}

#[test]
fn a_log_pipe_that_closes_mid_run_does_not_stop_gpufill() {
    let mut child = bin()
        .args(["simulate", "--realtime", "--duration", "2", "--every", "1"])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("metrics listening"), "{line}");
    drop(stderr); // journald restarted, the FIFO's reader gone
    // Each SIGHUP logs a line (nothing to reload), now into the closed pipe.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(200));
        signal(&child, "HUP");
    }
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// `gpufill args | head -1`: the exit status and how long gpufill ran.
fn into_head_1(args: &[&str]) -> (ExitStatus, Duration, String) {
    let start = Instant::now();
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    drop(stdout); // head -1 has its line and exits
    let status = wait_within(&mut child, Duration::from_secs(60));
    let took = start.elapsed();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, took, stderr)
}

#[test]
fn simulate_ends_promptly_and_quietly_when_its_reader_goes_away() {
    for (args, limit) in [
        (
            &["simulate", "--realtime", "--duration", "5", "--every", ".5"][..],
            Duration::from_secs(2),
        ),
        (
            &["simulate", "--duration", "2592000", "--every", "0.05"],
            Duration::from_secs(5),
        ),
    ] {
        let (status, took, stderr) = into_head_1(args);
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert!(took < limit, "{args:?} ran {took:?} after its reader left");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn simulate_into_a_full_disk_stops_with_exit_1_at_once() {
    let start = Instant::now();
    let out = bin()
        .args(["simulate", "--duration", "2592000", "--every", "0.05"])
        .stdout(dev_full())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn sigterm_ends_a_realtime_simulation_with_its_summary_and_exit_0() {
    for name in ["TERM", "INT"] {
        let mut child = bin()
            .args(["simulate", "--realtime", "--duration", "30", "--every", "5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let sent = Instant::now();
        signal(&child, name);
        let status = wait_within(&mut child, Duration::from_secs(5));
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "{:?}",
            sent.elapsed()
        );
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        assert_eq!(status.code(), Some(0), "SIG{name}: {stdout}");
        assert!(
            stdout.contains("settled within 2 points"),
            "SIG{name}: {stdout}"
        );
    }
}

#[test]
fn a_sighup_while_gpufill_starts_is_kept_not_fatal() {
    // From 20 ms after exec (the handler is installed first thing in main; before
    // main, a signal kills any program: docs/faults.md, "SIGHUP at any time").
    for _ in 0..5 {
        let mut child = bin()
            .args(["simulate", "--realtime", "--duration", "0.3"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        signal(&child, "HUP");
        let status = wait_within(&mut child, Duration::from_secs(10));
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
}
