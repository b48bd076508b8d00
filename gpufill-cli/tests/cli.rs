//! The `gpufill` binary end to end: exit codes, error messages, and `simulate`'s output.

use std::path::Path;

use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

mod common;

use common::{NoDriver, Row, gpufill, read_csv, ticks_in};

/// Settle time and mean absolute error over the util changes (new samples) in `[from, to)`.
fn judge(rows: &[Row], from: f64, to: f64) -> (f64, f64) {
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut last = None;
    for r in rows.iter().filter(|r| r.t >= from && r.t < to) {
        if r.util != last {
            if let Some(u) = r.util {
                samples.push((r.t, u - r.target));
            }
            last = r.util;
        }
    }
    let first_good = samples
        .iter()
        .rposition(|(_, e)| e.abs() > 2.0)
        .map_or(0, |i| i + 1);
    let held = &samples[first_good..];
    let mae = held.iter().map(|(_, e)| e.abs()).sum::<f64>() / held.len() as f64;
    (held[0].0 - from, mae)
}

#[test]
fn simulate_settles_within_a_second_and_holds_within_a_point() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let csv = dir.join("t.csv");
    gpufill()
        .args(["simulate", "--target", "50", "--duration", "20", "--csv"])
        .arg(&csv)
        .assert()
        .success()
        .stdout(contains("settled within 2 points of 50.0%"));
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), ticks_in(20.0), "one row per tick");
    let (settle, mae) = judge(&rows, 0.0, 20.0);
    assert!(settle <= 1.0, "settle {settle}");
    assert!(mae <= 1.0, "mae {mae}");
}

#[test]
fn simulate_yields_to_a_foreign_job_and_fills_again_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let csv = dir.join("t.csv");
    gpufill()
        .args([
            "simulate",
            "--target",
            "50",
            "--duration",
            "25",
            "--foreign",
            "5-12:30",
            "--csv",
        ])
        .arg(&csv)
        .assert()
        .success()
        .stdout(contains("slowed by 0.00%"));
    let rows = read_csv(&csv);
    for r in rows.iter().filter(|r| r.t >= 5.0 && r.t < 12.0) {
        assert_eq!(r.state, "yielding", "at {}", r.t);
        assert_eq!(r.duty, 0.0, "at {}", r.t);
    }
    // Default grace 5 s after the job leaves at 12 s, then back at target.
    assert!(rows.iter().any(|r| r.t >= 17.0 && r.state == "filling"));
    let (settle, mae) = judge(&rows, 17.0, 25.0);
    assert!(settle <= 1.5 && mae <= 1.0, "settle {settle}, mae {mae}");
}

#[test]
fn a_bad_config_value_exits_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "target_percent = 50\n[load]\nwidth_blocks = 0\n").unwrap();
    gpufill()
        .args(["simulate", "--config"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains(
            "bad.toml:3:16: load.width_blocks: must be between 1 and 65535, got 0",
        ));
}

#[test]
fn config_check_accepts_the_example_and_rejects_unknown_keys() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpufill.example.toml");
    gpufill()
        .args(["config", "check"])
        .arg(&example)
        .assert()
        .success()
        .stdout(contains("target_percent = 50.0"));
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let path = dir.join("typo.toml");
    std::fs::write(&path, "[yield]\ngrace = 3\n").unwrap();
    gpufill()
        .args(["config", "check"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("yield.grace: unknown field"));
}

#[test]
fn an_unknown_gpufill_variable_is_warned_of_naming_the_nearest_known_one() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpufill.example.toml");
    // GPUFILL_TARGT=90 meant GPUFILL_TARGET=90: it changes nothing, but says so.
    gpufill()
        .args(["config", "check"])
        .arg(&example)
        .env("GPUFILL_TARGT", "90")
        .assert()
        .success()
        .stdout(contains("target_percent = 50.0"))
        .stderr(contains(
            "unknown environment variable GPUFILL_TARGT (did you mean GPUFILL_TARGET?)",
        ));
    gpufill()
        .args(["config", "check"])
        .arg(&example)
        .env("GPUFILL_TARGET", "90")
        .assert()
        .success()
        .stderr(predicates::str::contains("unknown environment variable").not());
}

#[test]
fn a_bad_flag_exits_2_naming_the_flag() {
    gpufill()
        .args(["simulate", "--target", "150"])
        .assert()
        .code(2)
        .stderr(contains("invalid --target"));
    gpufill()
        .args(["simulate", "--foreign", "12-5:30"])
        .assert()
        .code(2)
        .stderr(contains("END must be after START"));
    gpufill().args(["run", "--gpus", "none"]).assert().code(2);
}

#[test]
fn clap_s_flag_errors_and_gpufill_s_own_read_the_same_way() {
    // A value clap refuses, a value gpufill's validation refuses, and an unknown flag:
    // each starts with "gpufill: " (not clap's "error: ") and exits 2.
    let cases = [
        (
            &["run", "--target", "abc"][..],
            "gpufill: invalid value 'abc' for '--target <PCT>'",
        ),
        (
            &["simulate", "--target", "150"],
            "gpufill: invalid --target",
        ),
        (
            &["simulate", "--frob"],
            "gpufill: unexpected argument '--frob' found",
        ),
    ];
    for (args, start) in cases {
        let out = gpufill().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(start), "{args:?}: {stderr}");
        assert!(!stderr.contains("error:"), "{args:?}: {stderr}");
    }
    // Help and the version are no errors: clap prints them to stdout, exit 0.
    gpufill()
        .args(["run", "--help"])
        .assert()
        .success()
        .stdout(contains("--target <PCT>"));
    gpufill()
        .arg("--version")
        .assert()
        .success()
        .stdout(contains(gpufill_cli::version::VERSION));
}

#[test]
fn without_a_driver_run_and_status_say_so_and_exit_1() {
    let hidden = NoDriver::new();
    let gpufill = || hidden.gpufill();
    gpufill().arg("run").assert().code(1).stderr(contains(
        "no NVIDIA driver: libcuda.so.1 was not found (install the NVIDIA driver",
    ));
    // status reads NVML only (tests/status.rs), so it names NVML's library, once.
    let out = gpufill().arg("status").assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert_eq!(
        stderr,
        "gpufill: cannot start NVML: libnvidia-ml.so.1 not found: install the NVIDIA driver\n"
    );
    // With --json, a reader of standard output gets JSON that says so.
    let out = gpufill().args(["status", "--json"]).assert().code(1);
    let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(json["driver"], serde_json::Value::Null);
    assert_eq!(json["gpus"], serde_json::json!([]));
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("libnvidia-ml.so.1 not found")),
        "{json}"
    );
}

#[test]
fn missing_unreadable_and_malformed_files_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let missing = dir.join("missing.toml");
    for sub in [&["simulate", "--config"][..], &["config", "check"][..]] {
        gpufill()
            .args(sub)
            .arg(&missing)
            .assert()
            .code(2)
            .stderr(contains("missing.toml"));
    }
    let binary = dir.join("binary.toml");
    std::fs::write(&binary, b"target_percent = 5\n\xff\xfe").unwrap();
    gpufill()
        .args(["config", "check"])
        .arg(&binary)
        .assert()
        .code(2)
        .stderr(contains("binary.toml:2:1"))
        .stderr(contains("not valid UTF-8"));
    let syntax = dir.join("syntax.toml");
    std::fs::write(&syntax, "[probe]\nretry_max_s = = 3\n").unwrap();
    gpufill()
        .args(["config", "check"])
        .arg(&syntax)
        .assert()
        .code(2)
        .stderr(contains("syntax.toml:2:"));
    gpufill()
        .args(["config", "check"])
        .arg(dir)
        .assert()
        .code(2);
}

#[test]
fn a_retry_max_below_the_initial_delay_exits_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retry.toml");
    std::fs::write(&path, "[probe]\nretry_initial_s = 10\nretry_max_s = 5\n").unwrap();
    gpufill()
        .args(["config", "check"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(contains("retry.toml:3:"))
        .stderr(contains(
            "probe.retry_max_s: must be between 10 and 86400, got 5",
        ));
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        &["simulate", "--no-such-flag"][..],
        &["simulate", "--duration", "-5"],
        &["simulate", "--duration", "nan"],
        &["simulate", "--tick-ms", "0"],
        &["simulate", "--random-foreign", "-1"],
        &["simulate", "--seed", "x"],
        &["run", "--duration", "0"],
        &["frobnicate"],
    ] {
        gpufill().args(args).assert().code(2);
    }
}

#[test]
fn a_simulated_hour_with_random_arrivals_never_fills_beside_a_listed_process() {
    a_random_hour_never_fills_beside_a_job(&[]);
}

#[test]
fn version_prints_the_version_and_the_commit() {
    let line = format!(
        "gpufill {} ({})\n",
        env!("CARGO_PKG_VERSION"),
        gpufill_cli::version::REVISION
    );
    gpufill().arg("--version").assert().success().stdout(line);
}

#[test]
fn simulate_inside_a_pid_namespace_yields_to_jobs_it_cannot_list() {
    // Issue 14: the foreign jobs are never listed; device memory shows them.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    gpufill()
        .args([
            "simulate",
            "--pid-namespace",
            "--duration",
            "25",
            "--foreign",
            "5-12:30",
            "--csv",
        ])
        .arg(&csv)
        .assert()
        .success()
        .stdout(contains("slowed by 0.00%"))
        .stdout(contains("resident beside it for 0.0 ms"));
    let rows = read_csv(&csv);
    for r in rows.iter().filter(|r| r.t >= 5.0 && r.t < 12.0) {
        assert_eq!(r.state, "yielding", "at {}", r.t);
    }
    assert!(rows.iter().any(|r| r.t >= 17.0 && r.state == "filling"));
    a_random_hour_never_fills_beside_a_job(&["--pid-namespace"]);
}

/// A simulated hour of random jobs (`extra` flags added) in which no tick fills while a
/// job is there and no kernel of ours runs beside one.
fn a_random_hour_never_fills_beside_a_job(extra: &[&str]) {
    gpufill()
        .arg("simulate")
        .args(extra)
        .args([
            "--duration",
            "3600",
            "--random-foreign",
            "60",
            "--seed",
            "5",
            "--every",
            "600",
        ])
        .assert()
        .success()
        .stdout(contains("ticks filling while one was listed: 0;"))
        .stdout(contains("our kernels beside them: 0.0 ms"));
}

/// The percent after "requests slowed by " in `simulate`'s output.
fn requests_slowed_by(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let (_, rest) = text
        .split_once("requests slowed by ")
        .unwrap_or_else(|| panic!("no service line in {text}"));
    rest.split('%').next().unwrap().parse().unwrap()
}

/// `simulate --service`: a service answering bursts of requests every 6 s. With the
/// default activity policy gpufill yields while it is new (its idle grace, 30 s), then
/// probes: every probe finds its bursts, so it is never filled beside (issue 21), and
/// its requests take as long as alone.
#[test]
fn simulate_never_fills_beside_a_live_service_and_reports_its_requests_against_alone() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    gpufill()
        .args([
            "simulate",
            "--duration",
            "100",
            "--service",
            "2-90:6:0.3",
            "--every",
            "10",
            "--csv",
        ])
        .arg(&csv)
        .assert()
        .success()
        .stdout(contains(
            "service 2-90 s, a 0.3 s burst every 6 s: requests slowed by 0.00% (median 5.590 ms against 5.590 ms alone;",
        ));
    let rows = read_csv(&csv);
    for r in rows.iter().filter(|r| r.t >= 2.0 && r.t < 90.0) {
        assert_eq!(r.state, "yielding", "at {}", r.t);
        assert_eq!(r.duty, 0.0, "at {}", r.t);
    }
    // Gone at 90 s: filling again (it was quiet, no grace is owed).
    assert!(
        rows.iter()
            .filter(|r| r.t >= 90.1)
            .all(|r| r.state == "filling")
    );
}

/// `simulate --service START-END:RATE/s:LENGTHms`: isolated requests. Beside them the
/// default never fills; under MPS gpufill fills beside them, and their median request
/// takes a little longer than alone (under 1 %).
#[test]
fn simulate_reports_isolated_requests_slowed_under_mps_and_not_without() {
    let run = |mps: bool| {
        let mut cmd = gpufill();
        cmd.args([
            "simulate",
            "--duration",
            "30",
            "--service",
            "2-60:20/s:0.87ms",
            "--every",
            "10",
        ]);
        if mps {
            cmd.arg("--mps");
        }
        let out = cmd.assert().success().get_output().stdout.clone();
        assert!(
            String::from_utf8_lossy(&out).contains("service 2-60 s, 20 requests/s of 0.87 ms: "),
            "{}",
            String::from_utf8_lossy(&out)
        );
        requests_slowed_by(&out)
    };
    assert_eq!(run(false), 0.0);
    let under_mps = run(true);
    assert!(under_mps > 0.0 && under_mps < 1.0, "{under_mps}");
}

/// `simulate --mps` with a service whose kernels fill every SM (`:gpu`): our 50 us
/// kernels (`load.mps_kernel_us`, the default) cost it about a percent, one long kernel
/// a burst (`mps_kernel_us = 0`) about ten (the bounds below), as measured
/// (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host).
#[test]
fn simulate_under_mps_honours_the_mps_kernel_length() {
    let dir = tempfile::tempdir().unwrap();
    let slowed = |mps_kernel_us: u64| {
        let config = dir.path().join(format!("{mps_kernel_us}.toml"));
        std::fs::write(
            &config,
            format!("[load]\nmps_kernel_us = {mps_kernel_us}\n"),
        )
        .unwrap();
        let out = gpufill()
            .args([
                "simulate",
                "--mps",
                "--duration",
                "60",
                "--service",
                "0-60:5/s:2ms:gpu",
            ])
            .arg("--config")
            .arg(&config)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        assert!(
            String::from_utf8_lossy(&out).contains("5 requests/s of 2 ms, filling every SM: "),
            "{}",
            String::from_utf8_lossy(&out)
        );
        requests_slowed_by(&out)
    };
    let short = slowed(50);
    let long = slowed(0);
    assert!(short < 1.5, "{short}");
    assert!((7.0..=12.0).contains(&long), "{long}");
}

/// `simulate` lays our kernels out as `load.max_kernel_us` says: 100 us kernels lose
/// 30 us each to launching, so the controller asks for a duty well above the target;
/// one 25 ms kernel a burst (the period's length at most) barely loses any.
#[test]
fn simulate_honours_the_longest_kernel_of_a_burst() {
    let dir = tempfile::tempdir().unwrap();
    let settled_duty = |max_kernel_us: u64| {
        let config = dir.path().join(format!("{max_kernel_us}.toml"));
        let csv = dir.path().join(format!("{max_kernel_us}.csv"));
        std::fs::write(
            &config,
            format!("[load]\nmax_kernel_us = {max_kernel_us}\n"),
        )
        .unwrap();
        gpufill()
            .args(["simulate", "--target", "50", "--duration", "20", "--config"])
            .arg(&config)
            .arg("--csv")
            .arg(&csv)
            .assert()
            .success();
        let mut duties: Vec<f64> = read_csv(&csv)
            .iter()
            .filter(|r| r.t >= 10.0)
            .map(|r| r.duty)
            .collect();
        duties.sort_by(f64::total_cmp);
        duties[duties.len() / 2]
    };
    let short = settled_duty(100);
    let long = settled_duty(50_000);
    assert!((65.0..76.0).contains(&short), "{short}");
    assert!((49.0..52.0).contains(&long), "{long}");
}

/// The target column of the first row `simulate` prints.
fn simulated_target(cmd: &mut assert_cmd::Command) -> String {
    let out = cmd.assert().success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let row = stdout.lines().nth(1).unwrap_or_else(|| panic!("{stdout}"));
    row.split_whitespace().nth(1).unwrap().to_owned()
}

#[test]
fn gpufill_variables_set_flags_below_the_command_line_and_above_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, "target_percent = 40\n").unwrap();
    let sim = || {
        let mut cmd = gpufill();
        cmd.args(["simulate", "--duration", "1", "--every", "1"]);
        cmd
    };
    assert_eq!(simulated_target(sim().env("GPUFILL_TARGET", "30")), "30.0");
    assert_eq!(
        simulated_target(sim().env("GPUFILL_TARGET", "30").args(["--target", "20"])),
        "20.0",
        "the flag wins"
    );
    assert_eq!(
        simulated_target(sim().env("GPUFILL_TARGET", "30").arg("--config").arg(&file)),
        "30.0",
        "the variable wins over the file"
    );
    assert_eq!(
        simulated_target(sim().env("GPUFILL_CONFIG", &file)),
        "40.0",
        "GPUFILL_CONFIG names the file"
    );
    // An empty variable is a value, refused as any other.
    sim()
        .env("GPUFILL_TARGET", "")
        .assert()
        .code(2)
        .stderr(contains(
            "GPUFILL_TARGET: invalid value '' for '--target <PCT>'",
        ));
}

#[test]
fn a_bad_gpufill_variable_exits_2_naming_the_variable() {
    gpufill()
        .args(["simulate", "--duration", "1"])
        .env("GPUFILL_TARGET", "abc")
        .assert()
        .code(2)
        .stderr(contains(
            "gpufill: GPUFILL_TARGET: invalid value 'abc' for '--target <PCT>'",
        ));
    gpufill()
        .args(["simulate", "--duration", "1"])
        .env("GPUFILL_TARGET", "500")
        .assert()
        .code(2)
        .stderr(contains(
            "gpufill: invalid GPUFILL_TARGET: target_percent: must be between 0 and 100, got 500",
        ));
    // The same value from the flag names the flag.
    gpufill()
        .args(["simulate", "--duration", "1", "--target", "500"])
        .env("GPUFILL_TARGET", "30")
        .assert()
        .code(2)
        .stderr(contains("gpufill: invalid --target: target_percent"));
    gpufill()
        .args(["simulate", "--duration", "1"])
        .env("GPUFILL_LOG_FORMAT", "xml")
        .assert()
        .code(2)
        .stderr(contains("GPUFILL_LOG_FORMAT: invalid value 'xml'"));
}

#[test]
fn help_lists_each_flag_s_variable() {
    let out = gpufill().args(["run", "--help"]).assert().success();
    let help = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    for var in [
        "GPUFILL_CONFIG",
        "GPUFILL_TARGET",
        "GPUFILL_CONTROLLER",
        "GPUFILL_METRIC",
        "GPUFILL_KERNEL",
        "GPUFILL_WIDTH",
        "GPUFILL_MAX_DUTY",
        "GPUFILL_GRACE",
        "GPUFILL_TICK_MS",
        "GPUFILL_PERIOD_MS",
        "GPUFILL_METRICS",
        "GPUFILL_GPUS",
        "GPUFILL_LOG_FORMAT",
    ] {
        assert!(help.contains(&format!("[env: {var}=")), "{var}:\n{help}");
    }
}

#[test]
fn healthcheck_refuses_an_address_it_cannot_probe_with_exit_2_and_a_silent_port_with_1() {
    gpufill()
        .args(["healthcheck", "--metrics", "localhost:9401"])
        .assert()
        .code(2)
        .stderr(contains("expected IP:PORT"));
    gpufill()
        .args([
            "healthcheck",
            "--metrics",
            "127.0.0.1:9401",
            "--timeout",
            "0",
        ])
        .assert()
        .code(2)
        .stderr(contains("--timeout must be more than 0"));
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    gpufill()
        .args(["healthcheck", "--metrics", &format!("0.0.0.0:{port}")])
        .assert()
        .code(1)
        .stderr(contains(format!(
            "http://127.0.0.1:{port}/healthz: no answer"
        )));
}
