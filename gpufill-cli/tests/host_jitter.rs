//! Issue 30 end to end on the simulated GPU: the host's own jitter in our kernels' timing
//! (`simulate --host-jitter`, calibrated on the host that paused with nobody there at
//! 052ca04:
//! docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in)
//! costs no pause and no point of the target, a live service is still
//! held off through it, and a holder that bursts now and then is filled beside again one
//! idle grace after each burst.

use std::path::Path;

mod common;

use common::{Row, gpufill, read_csv};

/// Runs `gpufill simulate` with `args` and a CSV; returns stdout and the rows.
fn simulate(dir: &Path, args: &[&str]) -> (String, Vec<Row>) {
    let csv = dir.join("t.csv");
    let out = gpufill()
        .arg("simulate")
        .args(args)
        .arg("--every")
        .arg("100000")
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (String::from_utf8(out.stdout).unwrap(), read_csv(&csv))
}

/// The mean of the new samples in `[from, to)`.
fn mean_util(rows: &[Row], from: f64, to: f64) -> f64 {
    let xs: Vec<f64> = rows
        .iter()
        .filter(|r| r.t >= from && r.t < to)
        .filter_map(|r| r.util)
        .collect();
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The number in "N <what>" in `text`.
fn count_before(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn with_the_hosts_jitter_nobody_there_is_ten_minutes_at_the_target_without_a_pause() {
    for seed in ["1", "2", "3"] {
        let dir = tempfile::tempdir().unwrap();
        let (out, rows) = simulate(
            dir.path(),
            &["--duration", "600", "--host-jitter", "--seed", seed],
        );
        assert!(out.contains("\n0 pauses\n"), "seed {seed}: {out}");
        // The jitter was there: about one stalled launch a second.
        let jitter = out.split("host jitter: ").nth(1).unwrap_or_default();
        let stalls = count_before(jitter, " of ");
        assert!(stalls > 300, "seed {seed}: {out}");
        let mean = mean_util(&rows, 5.0, 600.0);
        assert!((mean - 50.0).abs() <= 0.5, "seed {seed}: mean {mean}");
        assert!(rows.iter().all(|r| r.t < 1.0 || r.state == "filling"));
    }
}

#[test]
fn with_the_hosts_jitter_a_live_service_is_still_held_off() {
    let dir = tempfile::tempdir().unwrap();
    let (out, rows) = simulate(
        dir.path(),
        &[
            "--duration",
            "300",
            "--host-jitter",
            "--service",
            "2-300:20/s:0.87ms",
        ],
    );
    let slowed: f64 = out
        .split("requests slowed by ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(slowed <= 1.0, "{out}");
    assert!(out.contains("0 held up by a kernel of ours"), "{out}");
    // Listed from 2 s: never filled beside it.
    for r in rows.iter().filter(|r| r.t >= 2.1) {
        assert_eq!(r.duty, 0.0, "at {}", r.t);
    }
}

#[test]
fn a_holder_that_bursts_every_two_minutes_is_filled_beside_one_idle_grace_after_each() {
    let dir = tempfile::tempdir().unwrap();
    let (out, rows) = simulate(
        dir.path(),
        &["--duration", "600", "--service", "2-600:120:0.5"],
    );
    assert!(out.contains("\n4 pauses"), "{out}");
    // Bursts from 122, 242, 362 and 482 s: paused at each, filling again once the
    // idle grace (30 s, the default) has passed since it, not a second one later.
    for burst in [122.0, 242.0, 362.0, 482.0] {
        let paused = rows
            .iter()
            .find(|r| r.t >= burst && r.state != "filling")
            .unwrap();
        assert!(paused.t <= burst + 0.2, "{burst}: paused at {}", paused.t);
        let back = rows
            .iter()
            .find(|r| r.t > paused.t && r.state == "filling")
            .unwrap();
        let after = back.t - burst;
        assert!(
            (30.0..31.5).contains(&after),
            "{burst}: back after {after} s"
        );
        // The rest of the idle spell held at the target.
        let mean = mean_util(&rows, burst + 40.0, burst + 118.0);
        assert!(mean >= 49.0, "{burst}: mean {mean}");
    }
}
