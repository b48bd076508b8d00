//! `gpufill simulate` end to end with the features that act while it runs: the metrics
//! endpoint, SIGHUP reload, schedules. The realtime tests take a few seconds each and
//! poll with timeouts rather than sleeping fixed times.

mod common;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::gpufill;
use common::metrics::{LABELS, scrape, target, value};
use common::running::Running;
use predicates::str::contains;

/// Scrapes until `ok` holds for the text (up to 10 s); returns the last text.
fn scrape_until(port: u16, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(port);
        if ok(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never {what}:\n{text}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn simulate_realtime_serves_metrics_while_it_runs() {
    let mut g = Running::start(&[
        "simulate",
        "--realtime",
        "--duration",
        "3",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let port = g.metrics_port();
    let util = format!("gpufill_utilization_percent{{{LABELS}}}");
    let text = scrape_until(port, "a utilization sample", |t| value(t, &util).is_some());
    assert_eq!(target(&text), Some(50.0));
    let u = value(&text, &util).unwrap();
    assert!((0.0..=100.0).contains(&u), "{u}");
    assert_eq!(
        value(
            &text,
            &format!("gpufill_state{{{LABELS},state=\"filling\"}}")
        ),
        Some(1.0)
    );
    // Filling holds near the target once settled (well within the 3 s run).
    let text = scrape_until(port, "utilization near 50", |t| {
        value(t, &util).is_some_and(|u| (u - 50.0).abs() <= 3.0)
    });
    let build = format!(
        "gpufill_build_info{{version=\"{}\",revision=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        gpufill_cli::version::REVISION
    );
    assert!(text.contains(&build), "{text}");
    assert!(
        value(&text, "process_start_time_seconds").is_some(),
        "{text}"
    );
    let status = g.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn simulate_mps_reports_gpufill_as_an_mps_client() {
    let mut g = Running::start(&[
        "simulate",
        "--realtime",
        "--mps",
        "--duration",
        "2",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let port = g.metrics_port();
    let text = scrape_until(port, "the MPS state", |t| t.contains("gpufill_mps{"));
    assert_eq!(
        value(&text, "gpufill_mps{state=\"client\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "gpufill_mps{state=\"none\"}"),
        Some(0.0),
        "{text}"
    );
    assert!(g.child.wait().unwrap().success());
}

#[test]
fn healthcheck_passes_against_a_running_gpufill_and_logs_read_as_json() {
    let mut g = Running::start(&[
        "--log-format",
        "json",
        "simulate",
        "--realtime",
        "--duration",
        "30",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let port = g.metrics_port();
    // One JSON object a line, with the message among its fields.
    let line = g.wait_for("metrics listening on http://", 1);
    let object: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(object["level"], "INFO", "{line}");
    assert!(
        object["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("metrics listening on http://")),
        "{line}"
    );
    scrape_until(port, "a first tick", |t| {
        t.contains("gpufill_worker_up{") && t.contains("} 1\n")
    });
    let metrics = format!("127.0.0.1:{port}");
    let out = gpufill()
        .args(["healthcheck", "--metrics", &metrics])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("ok: http://{metrics}/healthz answered 200\n")
    );
    // The address comes from GPUFILL_METRICS as well, as in the container image.
    let out = gpufill()
        .arg("healthcheck")
        .env("GPUFILL_METRICS", format!("0.0.0.0:{port}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn sighup_applies_a_new_target_and_refuses_a_broken_file_keeping_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, "target_percent = 40\n").unwrap();
    let file_arg = file.to_str().unwrap();
    let mut g = Running::start(&[
        "simulate",
        "--realtime",
        "--duration",
        "30",
        "--config",
        file_arg,
        "--metrics",
        "127.0.0.1:0",
    ]);
    let port = g.metrics_port();
    scrape_until(port, "target 40", |t| target(t) == Some(40.0));

    std::fs::write(
        &file,
        "target_percent = 70\ntick_ms = 20\n[load]\nperiod_ms = 20\n",
    )
    .unwrap();
    g.signal("HUP");
    scrape_until(port, "target 70 after SIGHUP", |t| target(t) == Some(70.0));
    g.wait_for("config reloaded", 1);
    g.wait_for("tick_ms changed but needs a restart", 1);

    std::fs::write(&file, "target_percent = 20\n[load]\nwidth_blocks = 0\n").unwrap();
    g.signal("HUP");
    let line = g.wait_for("reload refused", 1);
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("g.toml:3:16: load.width_blocks: must be between 1 and 65535, got 0"),
        "{line}"
    );
    // Give a wrongly applied target time to show, then check the old one held.
    thread::sleep(Duration::from_millis(200));
    let text = scrape(port);
    assert_eq!(target(&text), Some(70.0));
    // Said as Prometheus says its own: the last reload failed, the last success stays.
    assert_eq!(
        value(&text, "gpufill_config_last_reload_successful"),
        Some(0.0),
        "{text}"
    );
    let success = value(
        &text,
        "gpufill_config_last_reload_success_timestamp_seconds",
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(success <= now && success > now - 60.0, "{success}");
    for series in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ] {
        assert!(value(&text, series).is_some(), "{series}:\n{text}");
    }
}

fn window_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("w.toml");
    std::fs::write(
        &path,
        "[[schedule.window]]\nstart = \"22:00\"\nend = \"06:00\"\ntarget_percent = 0\n",
    )
    .unwrap();
    path
}

#[test]
fn simulate_crosses_a_window_boundary_in_virtual_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = window_config(dir.path());
    let csv = dir.path().join("t.csv");
    gpufill()
        .args(["simulate", "--start-time", "21:59", "--duration", "70"])
        .arg("--config")
        .arg(&config)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success();
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<(f64, f64, f64)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[3].parse().unwrap(),
            )
        })
        .collect();
    assert!(rows.iter().filter(|r| r.0 < 60.0).all(|r| r.1 == 50.0));
    assert!(rows.iter().filter(|r| r.0 >= 60.0).all(|r| r.1 == 0.0));
    assert!(rows.last().unwrap().2 < 1.0, "duty off inside the window");
}

#[test]
fn windows_use_the_local_time_of_the_tz_variable() {
    let dir = tempfile::tempdir().unwrap();
    let config = window_config(dir.path());
    let start_in = |tz: &str| -> u32 {
        let out = gpufill()
            .env("TZ", tz)
            .args(["simulate", "--duration", "0.1", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("time of day at the start: "))
            .unwrap_or_else(|| panic!("{stdout}"));
        let (h, m) = line.split_once(':').unwrap();
        h.parse::<u32>().unwrap() * 60 + m.parse::<u32>().unwrap()
    };
    let utc = start_in("UTC0");
    // POSIX TZ: "XXX-12" is twelve hours east of UTC.
    let east = start_in("XXX-12");
    let diff = (east + 1440 - utc) % 1440;
    assert!((719..=721).contains(&diff), "UTC {utc}, UTC+12 {east}");
}

#[test]
fn a_bad_metrics_address_exits_2_and_a_taken_port_exits_1() {
    gpufill()
        .args(["simulate", "--metrics", "localhost"])
        .assert()
        .code(2)
        .stderr(contains("invalid --metrics"))
        .stderr(contains("expected IP:PORT"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    gpufill()
        .args(["simulate", "--duration", "1", "--metrics", &addr])
        .assert()
        .code(1)
        .stderr(contains(format!("cannot serve metrics on {addr}")));
}

#[test]
fn simulate_honours_the_idle_rule_and_drops_it_while_a_job_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idle.toml");
    std::fs::write(
        &config,
        "target_percent = 50\n[schedule]\nidle_after_s = 5\nidle_target_percent = 60\n",
    )
    .unwrap();
    let csv = dir.path().join("t.csv");
    gpufill()
        .args(["simulate", "--duration", "30", "--foreign", "10-12:30"])
        .arg("--config")
        .arg(&config)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        // Tracking is judged from the schedule's last change before the job (5 s, to 60 %).
        .stdout(contains("target at 5.00 s"))
        .stdout(contains("settled within 2 points of 60.0%"));
    let text = std::fs::read_to_string(&csv).unwrap();
    let target_at = |t: f64| -> f64 {
        text.lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f[0].parse::<f64>().unwrap() >= t)
            .map(|f| f[1].parse().unwrap())
            .unwrap()
    };
    assert_eq!(target_at(4.9), 50.0);
    assert_eq!(target_at(5.1), 60.0);
    // The job is there 10-12 s: default target; quiet again from 12 s, so 60 % from 17 s.
    assert_eq!(target_at(10.1), 50.0);
    assert_eq!(target_at(16.9), 50.0);
    assert_eq!(target_at(17.1), 60.0);
}
