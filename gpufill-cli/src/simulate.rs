//! `gpufill simulate`: the real fill loop against the simulated GPU, in virtual time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use gpufill_core::sim::{
    Arrivals, ChurnReport, ForeignJob, LongRunStats, Period, SimConfig, Simulation, tracking,
};
use gpufill_core::{State, Tick, Time};

use crate::UsageError;
use crate::cli::SimulateArgs;
use crate::config::Config;

/// One `--foreign START-END:LOAD`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForeignSpec {
    /// When it appears, in seconds.
    pub start_s: f64,
    /// When it leaves, in seconds.
    pub end_s: f64,
    /// Share of time it wants the GPU, percent.
    pub load_percent: f64,
}

/// Parses `START-END:LOAD`, e.g. `5-12:30`.
///
/// # Errors
/// A message saying what is wrong, for clap to print.
pub fn parse_foreign(s: &str) -> Result<ForeignSpec, String> {
    let bad = || format!("expected START-END:LOAD in seconds and percent, e.g. 5-12:30, got {s:?}");
    let (span, load) = s.split_once(':').ok_or_else(bad)?;
    let (start, end) = span.split_once('-').ok_or_else(bad)?;
    let num = |x: &str| x.trim().parse::<f64>().ok().filter(|v| v.is_finite());
    let (start_s, end_s, load_percent) = match (num(start), num(end), num(load)) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err(bad()),
    };
    if start_s < 0.0 || end_s <= start_s {
        return Err(format!(
            "foreign job {s:?}: END must be after START, both at least 0"
        ));
    }
    if !(0.0..=100.0).contains(&load_percent) {
        return Err(format!(
            "foreign job {s:?}: LOAD must be a percent between 0 and 100"
        ));
    }
    Ok(ForeignSpec {
        start_s,
        end_s,
        load_percent,
    })
}

fn check_args(args: &SimulateArgs) -> Result<(), UsageError> {
    let fail = |m: String| Err(UsageError(anyhow::anyhow!(m)));
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 30.0 * 86400.0) {
        return fail(format!(
            "--duration must be between 0 and 2592000 seconds, got {}",
            args.duration
        ));
    }
    if !(args.every.is_finite() && args.every > 0.0) {
        return fail(format!(
            "--every must be a positive number of seconds, got {}",
            args.every
        ));
    }
    if let Some(rate) = args
        .random_foreign
        .filter(|r| !(r.is_finite() && (0.0..=1e6).contains(r)))
    {
        return fail(format!(
            "--random-foreign must be between 0 and 1000000 per hour, got {rate}"
        ));
    }
    if !(1..=10_000).contains(&args.sample_ms) {
        return fail(format!(
            "--sample-ms must be between 1 and 10000, got {}",
            args.sample_ms
        ));
    }
    Ok(())
}

/// Runs the simulation described by `args` and `config`, printing a table to `out`.
///
/// # Errors
/// [`UsageError`] for bad flags; I/O errors writing the CSV.
pub fn run(args: &SimulateArgs, config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    check_args(args)?;
    let sim_cfg = SimConfig {
        sample_period: Duration::from_millis(args.sample_ms),
        mps: args.mps,
        foreign: args
            .foreign
            .iter()
            .map(|f| ForeignJob::compute_bound(f.start_s, f.end_s, f.load_percent / 100.0))
            .collect(),
        ..SimConfig::default()
    };
    let settings = config.fill_settings();
    let mut sim = Simulation::new(
        sim_cfg,
        settings,
        config.yield_settings_with(args.mps),
        config.controller_kind().build(),
        config.tick(),
    );
    let mut csv = match &args.csv {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = BufWriter::new(file);
            writeln!(w, "t_s,target,util,duty,state")?;
            Some((w, path))
        }
        None => None,
    };
    writeln!(
        out,
        "{:>8} {:>7} {:>6} {:>6}  {:<9} foreign",
        "t_s", "target", "util", "duty", "state"
    )?;
    let every = Time::from_secs_f64(args.every).since_epoch();
    let mut next_row = Time::ZERO;
    let end = Time::from_secs_f64(args.duration);
    let mut arrivals = Arrivals::new(
        args.seed,
        args.random_foreign.unwrap_or(0.0),
        (Duration::from_secs(10), Duration::from_secs(600)),
        Time::ZERO,
    );
    // Tracking is judged up to the first foreign arrival; only those samples are kept,
    // so memory does not grow with the duration.
    let first_foreign = args
        .foreign
        .iter()
        .map(|f| f.start_s)
        .fold(args.duration.min(arrivals.next_at()), f64::min);
    let judged_until = Time::from_secs_f64(first_foreign);
    let mut judged = Vec::new();
    let mut hours = LongRunStats::new(Duration::from_secs(3600), Duration::from_secs(3));
    let mut last = None;
    let mut io_result = Ok(());
    let churn = sim.run_with_arrivals(end, &mut arrivals, |tick| {
        if let Some((w, _)) = csv.as_mut().filter(|_| io_result.is_ok()) {
            io_result = write_csv_row(w, tick);
        }
        if tick.at >= next_row {
            let _ = write_row(out, tick);
            next_row += every;
        }
        if tick.at < judged_until && tick.sample.is_some() {
            judged.push(tick.clone());
        }
        hours.record(tick);
        last = Some((tick.at, tick.state));
    });
    io_result.context("cannot write the CSV file")?;
    if let Some((mut w, path)) = csv {
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    summarize(out, &sim, &judged, judged_until, settings.target, args)?;
    if args.random_foreign.is_some() || args.duration >= 7200.0 {
        write_long_run(out, &churn, hours.periods())?;
    }
    if let Some((at, State::Stopped)) = last {
        bail!("the simulated loop stopped at {:.2} s", at.as_secs_f64());
    }
    Ok(())
}

fn write_long_run(
    out: &mut dyn Write,
    churn: &ChurnReport,
    hours: &[Period],
) -> std::io::Result<()> {
    writeln!(
        out,
        "random foreign jobs: {} arrived; ticks filling while one was listed: {}; our kernels beside them: {:.1} ms; most kept at once: {}",
        churn.arrived,
        churn.filling_while_listed,
        churn.overlap.as_secs_f64() * 1e3,
        churn.max_retained
    )?;
    writeln!(
        out,
        "{:>5} {:>9} {:>8} {:>7} {:>9}",
        "hour", "samples", "MAE", "events", "yielding"
    )?;
    for (i, p) in hours.iter().enumerate() {
        writeln!(
            out,
            "{:>5} {:>9} {:>8.3} {:>7} {:>8.1}%",
            i,
            p.samples,
            p.mean_abs_error,
            p.events,
            100.0 * p.yielding_ticks as f64 / p.ticks.max(1) as f64
        )?;
    }
    Ok(())
}

fn percent(u: Option<gpufill_core::Utilization>) -> String {
    u.map_or_else(String::new, |u| format!("{:.1}", u.percent()))
}

fn write_csv_row(w: &mut dyn Write, t: &Tick) -> std::io::Result<()> {
    writeln!(
        w,
        "{:.3},{:.1},{},{:.2},{}",
        t.at.as_secs_f64(),
        t.target.percent(),
        percent(t.util),
        t.duty.percent(),
        t.state.as_str()
    )
}

fn write_row(out: &mut dyn Write, t: &Tick) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>8.2} {:>7.1} {:>6} {:>6.1}  {:<9} {}",
        t.at.as_secs_f64(),
        t.target.percent(),
        percent(t.util),
        t.duty.percent(),
        t.state.as_str(),
        t.foreign
    )
}

fn summarize(
    out: &mut dyn Write,
    sim: &Simulation,
    judged: &[Tick],
    judged_until: Time,
    target: gpufill_core::Utilization,
    args: &SimulateArgs,
) -> anyhow::Result<()> {
    let end = sim.now().max(Time::from_secs_f64(args.duration));
    let t = tracking(judged, Time::ZERO, judged_until, target, 2.0);
    writeln!(out)?;
    match t.settle {
        Some(s) => writeln!(
            out,
            "settled within 2 points of {:.1}% after {:.2} s; mean absolute error after that {:.2} points over {} samples",
            target.percent(),
            s.as_secs_f64(),
            t.mean_abs_error,
            t.samples
        )?,
        None => writeln!(
            out,
            "did not settle within 2 points of {:.1}%",
            target.percent()
        )?,
    }
    let report = sim.gpu().report(end);
    for (spec, job) in args.foreign.iter().zip(&report.foreign) {
        writeln!(
            out,
            "foreign job {}-{} s at {:.0}%: slowed by {:.2}%, our kernels resident beside it for {:.1} ms",
            spec.start_s,
            spec.end_s,
            spec.load_percent,
            job.slowdown * 100.0,
            job.overlap.as_secs_f64() * 1000.0
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_foreign_job_spec() {
        assert_eq!(
            parse_foreign("5-12:30").unwrap(),
            ForeignSpec {
                start_s: 5.0,
                end_s: 12.0,
                load_percent: 30.0
            }
        );
        assert_eq!(parse_foreign("0.5-1.5:100").unwrap().end_s, 1.5);
    }

    #[test]
    fn rejects_malformed_foreign_job_specs() {
        for bad in [
            "", "5-12", "5:30", "12-5:30", "5-12:130", "a-b:c", "5-12:nan", "-1-3:10",
        ] {
            assert!(parse_foreign(bad).is_err(), "{bad}");
        }
    }
}
