//! `gpufill simulate --metric sm` end to end: the table and the CSV show SM activity
//! and width, and the loop holds the SM target.

use predicates::str::contains;

mod common;

use common::gpufill;

#[test]
fn simulate_with_the_sm_metric_holds_the_target_and_shows_the_width() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sm.csv");
    gpufill()
        .args([
            "simulate",
            "--metric",
            "sm",
            "--target",
            "30",
            "--duration",
            "10",
        ])
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        .stdout(contains("     sm   duty  width"))
        .stdout(contains("settled within 2 points of 30.0%"))
        .stdout(contains(
            "width after settling: 132-132 blocks (one per SM), 0 changes",
        ));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("t_s,target,sm,duty,width,state"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), common::ticks_in(10.0), "one row per tick");
    for row in &rows {
        let width: u32 = row[4].parse().unwrap();
        assert!((1..=132).contains(&width), "{row:?}");
    }
    // At the end: on target, every SM for about 30 % of the time (the default model).
    let last = rows.last().unwrap();
    let sm: f64 = last[2].parse().unwrap();
    let duty: f64 = last[3].parse().unwrap();
    assert!((sm - 30.0).abs() <= 2.0, "{last:?}");
    assert_eq!(last[4], "132");
    assert!((29.0..=33.0).contains(&duty), "{last:?}");
}

#[test]
fn an_unknown_metric_is_a_usage_error() {
    gpufill()
        .args(["simulate", "--metric", "tensor"])
        .assert()
        .code(2)
        .stderr(contains("invalid value 'tensor' for '--metric"));
}

#[test]
fn a_bad_metric_in_the_file_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.toml");
    std::fs::write(&file, "metric = \"sms\"\n").unwrap();
    gpufill()
        .args(["simulate", "--config"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(contains(
            "g.toml:1:10: metric: expected \"util\" or \"sm\", got \"sms\"",
        ));
}
