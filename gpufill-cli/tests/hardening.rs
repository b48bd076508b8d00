//! Hardening, round 3 (issue 31), end to end: a log that cannot vanish, reloads applied
//! whole or not at all, and the small ones (full streams, huge numbers, NUL bytes).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

fn gpufill() -> Command {
    let mut cmd = Command::cargo_bin("gpufill").unwrap();
    cmd.env("NO_COLOR", "1").env_remove("RUST_LOG");
    cmd
}

#[test]
fn a_rust_log_that_is_not_understood_falls_back_to_the_flags_level_with_one_warning() {
    for rust_log in ["", "garbage"] {
        let out = gpufill()
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

/// A running `gpufill simulate --realtime`, its stderr lines on a channel.
struct Running {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = gpufill()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to 10 s until `count` stderr lines contain `needle`; returns the last.
    fn wait_for(&mut self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found: Vec<&String> = self.seen.iter().filter(|l| l.contains(needle)).collect();
            if found.len() >= count {
                return found[count - 1].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("not {count} lines with {needle:?} in {:#?}", self.seen),
            }
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn metrics_port(&mut self) -> u16 {
        let line = self.wait_for("metrics listening on http://127.0.0.1:", 1);
        let rest = &line[line.find("127.0.0.1:").unwrap() + 10..];
        rest.split('/').next().unwrap().parse().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The target gpufill holds, from its metrics.
fn target_in_force(port: u16) -> f64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("gpufill_target_percent{")?
                .split_once("} ")?
                .1
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no target in {text}"))
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
    let status = loop {
        if let Some(status) = g.child.try_wait().unwrap() {
            break status;
        }
        assert!(sent.elapsed() < Duration::from_secs(5), "still running");
        std::thread::sleep(Duration::from_millis(10));
    };
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
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = gpufill().args(args).stdout(full).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("gpufill: cannot write to standard output: "),
            "{args:?}: {stderr}"
        );
    }
    // Into a pipe whose reader has gone (`| head -1`) is no failure.
    let mut child = gpufill()
        .arg("--help")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
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
        let out = gpufill().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("' for '{flag}': out of range: ")),
            "{stderr}"
        );
        assert!(!stderr.contains("got inf"), "{stderr}");
        assert!(stderr.len() < 300, "the value is shortened: {stderr}");
    }
    let out = gpufill()
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
    let out = gpufill()
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
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
