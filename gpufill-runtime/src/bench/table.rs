//! `gpufill bench`'s text: the table, one row per target, then the yield test, from a
//! [`BenchSummary`]; and `bench.csv`, one row per tick of a [`Recording`].

use std::io::{self, Write};

use super::{BenchSummary, Recording, YieldSummary};

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

/// Prints the table: one row per target, then the yield test.
///
/// # Errors
/// I/O errors of `out`.
pub fn write_table(summary: &BenchSummary, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "gpufill bench on {}: {} s per target, tick {} ms, idle power {} W",
        summary.gpu,
        summary.seconds_per_target,
        summary.tick_ms,
        opt(summary.idle_power_w, 0)
    )?;
    writeln!(
        out,
        "{:>8} {:>9} {:>8} {:>9} {:>8} {:>11} {:>8} {:>9} {:>7}",
        "target_%",
        "settle_s",
        "mae_pts",
        "util_%",
        "samples",
        "memory_MiB",
        "power_W",
        "+idle_W",
        "pauses"
    )?;
    for t in &summary.targets {
        let extra = t.mean_power_w.zip(summary.idle_power_w).map(|(p, i)| p - i);
        let settle = if t.pauses > 0 {
            "paused".to_owned()
        } else {
            opt(t.settle_s, 2)
        };
        writeln!(
            out,
            "{:>8.1} {:>9} {:>8} {:>9} {:>8} {:>11} {:>8} {:>9} {:>7}",
            t.target_percent,
            settle,
            opt(t.mean_abs_error_points, 2),
            opt(t.mean_util_percent, 1),
            t.samples,
            opt(t.own_memory_mib, 0),
            opt(t.mean_power_w, 0),
            opt(extra, 0),
            t.pauses
        )?;
    }
    let pauses = summary.pauses();
    if pauses > 0 {
        writeln!(
            out,
            "gpufill paused or yielded {pauses} times in the targets with nobody else on the \
             GPU: it took the host for another process, so the targets marked \"paused\" \
             have no settle time (run with -v to see the evidence it logged)"
        )?;
    }
    if summary.idle_power_suspect() {
        writeln!(
            out,
            "note: the idle power read above the power while filling: the GPU was still \
             clocked up from earlier work, so +idle_W is not meaningful (let it rest a \
             minute before the bench)"
        )?;
    }
    match (&summary.yield_test, &summary.yield_skipped) {
        (Some(y), _) => write_yield(out, y),
        (None, Some(why)) => writeln!(out, "yield test skipped: {why}"),
        (None, None) => Ok(()),
    }
}

fn write_yield(out: &mut dyn Write, y: &YieldSummary) -> io::Result<()> {
    writeln!(out, "yield test at {:.0}%:", y.target_percent)?;
    writeln!(
        out,
        "  foreign process listed by NVML {} s after it started",
        opt(y.listed_after_start_s, 3)
    )?;
    writeln!(
        out,
        "  yielding {} ms after it was listed; our launcher idle after {} ms",
        opt(y.yielding_after_ms, 1),
        opt(y.launcher_idle_after_ms, 1)
    )?;
    if let Some(k) = y.own_kernels_while_yielding {
        writeln!(out, "  our kernels launched while yielding: {k}")?;
    }
    if let Some(ms) = y.overlap_ms {
        writeln!(out, "  our kernels resident beside its kernels: {ms:.1} ms")?;
    }
    writeln!(
        out,
        "  filling again {} s after it exited (grace {} s)",
        opt(y.filling_again_after_exit_s, 2),
        y.grace_s
    )?;
    writeln!(
        out,
        "  {}",
        if y.passed() {
            "ok: yielded, stayed idle and came back"
        } else {
            "FAILED: see the lines above"
        }
    )
}

/// `t_s,target,util,duty,state`, one row per tick; `util` is the NVML sample read in
/// that tick, empty when none arrived.
///
/// # Errors
/// I/O errors of `w`.
pub fn write_csv(w: &mut dyn Write, rec: &Recording) -> io::Result<()> {
    writeln!(w, "t_s,target,util,duty,state")?;
    for t in &rec.ticks {
        writeln!(
            w,
            "{:.3},{:.1},{},{:.2},{}",
            t.at.saturating_since(rec.start).as_secs_f64(),
            t.target.percent(),
            t.sample
                .map_or_else(String::new, |s| format!("{:.1}", s.percent())),
            t.duty.percent(),
            t.state.as_str()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::TargetSummary;

    use super::*;

    /// A target at 50 % that settled at once, with this power.
    fn settled(mean_power_w: f64, pauses: usize) -> TargetSummary {
        TargetSummary {
            target_percent: 50.0,
            settle_s: (pauses == 0).then_some(0.0),
            pauses,
            mean_abs_error_points: Some(0.0),
            mean_util_percent: Some(50.0),
            samples: 2,
            own_memory_mib: None,
            mean_power_w: Some(mean_power_w),
        }
    }

    fn table(idle_power_w: Option<f64>, targets: Vec<TargetSummary>, skipped: bool) -> String {
        let summary = BenchSummary {
            gpu: "simulated GPU".into(),
            simulated: true,
            seconds_per_target: 5.0,
            tick_ms: 10,
            idle_power_w,
            targets,
            yield_test: None,
            yield_skipped: skipped.then(|| "--no-yield".into()),
        };
        let mut out = Vec::new();
        write_table(&summary, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_table_shows_every_target_and_the_yield_verdict() {
        let text = table(Some(80.0), vec![settled(120.0, 0)], true);
        let row = text.lines().nth(2).unwrap();
        let cells: Vec<_> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            ["50.0", "0.00", "0.00", "50.0", "2", "-", "120", "40", "0"]
        );
        assert!(text.contains("yield test skipped: --no-yield"));
        assert!(!text.contains("not meaningful"));
    }

    #[test]
    fn an_idle_power_above_the_filling_power_is_flagged() {
        let text = table(Some(127.0), vec![settled(123.0, 0)], false);
        assert!(text.contains("+idle_W is not meaningful"), "{text}");
    }

    #[test]
    fn a_target_in_which_gpufill_paused_says_so() {
        let text = table(None, vec![settled(120.0, 1), settled(120.0, 0)], false);
        let row: Vec<_> = text.lines().nth(2).unwrap().split_whitespace().collect();
        assert_eq!((row[1], row[8]), ("paused", "1"), "{text}");
        assert!(text.contains("paused or yielded 1 times in the targets with nobody else"));
    }
}
