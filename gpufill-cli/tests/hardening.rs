//! Hardening, round 3 (issue 31), end to end: a log that cannot vanish, reloads applied
//! whole or not at all, and the small ones (full streams, huge numbers, NUL bytes).

use std::process::{Command, Stdio};

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
