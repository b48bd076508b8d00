//! `gpufill bench` end to end on the simulated GPU: the table, bench.svg, bench.csv
//! and bench.json; and its errors.

use predicates::str::contains;

mod common;

use common::{NoDriver, gpufill, read_csv, ticks_in};

fn polyline_points(svg: &str, id: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).expect("bench.svg is XML");
    let line = doc
        .descendants()
        .find(|n| n.has_tag_name("polyline") && n.attribute("id") == Some(id))
        .expect("polyline");
    line.attribute("points").unwrap().split_whitespace().count()
}

#[test]
fn bench_on_the_simulated_gpu_writes_the_table_plot_csv_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let assert = gpufill()
        .args(["bench", "--sim", "--seconds", "5", "--out"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();

    // The table: one row per default target, each settled with a small error.
    for target in ["10.0", "25.0", "50.0", "75.0", "90.0"] {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(target))
            .unwrap_or_else(|| panic!("no row for {target} in\n{stdout}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let settle: f64 = cells[1].parse().expect("settled");
        let mae: f64 = cells[2].parse().expect("an error");
        assert!(settle < 2.0 && mae < 1.0, "{row}");
    }
    assert!(stdout.contains("yield test at 90%"), "{stdout}");
    assert!(
        stdout.contains("ok: yielded, stayed idle and came back"),
        "{stdout}"
    );

    // The CSV: one row per tick on one time axis, every target, a yield.
    let rows = read_csv(&out.join("bench.csv"));
    let span = rows.last().unwrap().t - rows[0].t;
    assert_eq!(rows.len(), ticks_in(span) + 1);
    // 5 targets x 5 s, then 2 s + 3 s foreign + 5 s grace + 2 s.
    assert!((span - 37.0).abs() < 0.5, "{span}");
    assert!(rows.iter().any(|r| r.state == "yielding"));
    // Each target 5 s of ticks; the last one goes on through the yield test.
    for target in [10.0, 25.0, 50.0, 75.0] {
        assert_eq!(
            rows.iter().filter(|r| r.target == target).count(),
            ticks_in(5.0)
        );
    }
    assert_eq!(
        rows.iter().filter(|r| r.target == 90.0).count(),
        rows.len() - 4 * ticks_in(5.0)
    );

    // The plot: valid XML, one point per NVML sample in the CSV, a shaded yield window.
    let svg = std::fs::read_to_string(out.join("bench.svg")).unwrap();
    let samples = rows.iter().filter(|r| r.util.is_some()).count();
    assert!(samples > 150, "{samples}");
    assert_eq!(polyline_points(&svg, "util"), samples);
    assert!(svg.contains(r#"class="shade""#));

    // The summary: the same targets, and a yield latency.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
    assert_eq!(json["simulated"], true);
    assert_eq!(json["targets"].as_array().unwrap().len(), 5);
    let y = &json["yield_test"];
    let latency = y["yielding_after_ms"].as_f64().expect("a yield latency");
    assert!((0.0..=20.0).contains(&latency), "{y}");
    assert_eq!(y["overlap_ms"].as_f64(), Some(0.0));
    let back = y["filling_again_after_exit_s"]
        .as_f64()
        .expect("filled again");
    assert!((4.9..=5.3).contains(&back), "{y}");
}

/// `gpufill bench --sim --no-yield --targets 40 --seconds <seconds>`.
fn bench_at_40(seconds: &str) -> assert_cmd::Command {
    let mut cmd = gpufill();
    cmd.args(["bench", "--sim", "--no-yield", "--targets", "40"])
        .args(["--seconds", seconds]);
    cmd
}

#[test]
fn bench_without_the_yield_test_says_it_was_skipped() {
    let dir = tempfile::tempdir().unwrap();
    bench_at_40("2")
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success()
        .stdout(contains("yield test skipped: --no-yield"));
    let svg = std::fs::read_to_string(dir.path().join("bench.svg")).unwrap();
    assert!(!svg.contains(r#"class="shade""#));
    let rows = read_csv(&dir.path().join("bench.csv"));
    assert_eq!(rows.len(), ticks_in(2.0));
    assert!(
        rows.iter()
            .all(|r| r.target == 40.0 && r.state == "filling")
    );
}

#[test]
fn bench_on_the_simulated_gpu_warns_that_gpu_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = bench_at_40("1")
            .args(extra)
            .arg("--out")
            .arg(dir.path())
            .assert()
            .success();
        String::from_utf8_lossy(&out.get_output().stderr).into_owned()
    };
    let warned = run(&["--gpu", "3"]);
    assert!(
        warned.contains("--gpu 3 is not used with --sim"),
        "{warned}"
    );
    assert!(!run(&[]).contains("--gpu"), "no warning without --gpu");
}

#[test]
fn bench_rejects_bad_flags_with_exit_2() {
    for (flags, message) in [
        (&["--targets", "0"][..], "above 0 and at most 100"),
        (&["--targets", "50,150"][..], "above 0 and at most 100"),
        (
            &["--seconds", "0.5"][..],
            "--seconds must be between 1 and 3600",
        ),
    ] {
        gpufill()
            .args(["bench", "--sim"])
            .args(flags)
            .assert()
            .code(2)
            .stderr(contains(message));
    }
    gpufill()
        .args(["bench", "--gpu", "GPU"])
        .assert()
        .code(2)
        .stderr(contains("GPU-"));
}

#[test]
fn bench_without_a_driver_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    NoDriver::new()
        .gpufill()
        .args(["bench", "--out"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(contains(
            "no NVIDIA driver: libcuda.so.1 was not found (install the NVIDIA driver",
        ))
        .stderr(contains("`gpufill bench --sim` measures the simulated GPU"));
}

#[test]
fn bench_measures_the_settings_of_a_config_file_and_refuses_the_sm_metric() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("g.toml");
    let bench_with = |text: &str| {
        std::fs::write(&config, text).unwrap();
        gpufill()
            .args(["bench", "--sim", "--no-yield", "--targets", "40"])
            .args(["--seconds", "2", "--config"])
            .arg(&config)
            .arg("--out")
            .arg(dir.path())
            .assert()
    };
    bench_with("tick_ms = 20\n[load]\nperiod_ms = 20\n")
        .success()
        .stdout(contains("tick 20 ms"));
    // One row per 20 ms tick, not per default tick.
    assert_eq!(read_csv(&dir.path().join("bench.csv")).len(), 100);

    bench_with("metric = \"sm\"\n").code(2).stderr(contains(
        "g.toml: metric: bench measures metric = \"util\" only",
    ));
}
