//! A `gpufill` that runs while the test talks to it: its stderr lines, signals, a bounded wait.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::bin;

/// A running `gpufill` (from [`bin`]), its stderr lines arriving on a channel.
pub struct Running {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// Every stderr line read so far.
    pub seen: Vec<String>,
}

impl Running {
    pub fn start(args: &[&str]) -> Running {
        let mut child = bin()
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
    pub fn wait_for(&mut self, needle: &str, count: usize) -> String {
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

    pub fn signal(&self, name: &str) {
        signal(&self.child, name);
    }

    /// The port of the metrics endpoint, from its "metrics listening" line.
    pub fn metrics_port(&mut self) -> u16 {
        let line = self.wait_for("metrics listening on http://", 1);
        let url = &line[line.find("http://").unwrap() + 7..];
        let host_port = url.split('/').next().unwrap();
        host_port.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `SIG<name>` to `child` with kill(1).
pub fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits up to `limit` for `child`; kills it and fails past that.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
