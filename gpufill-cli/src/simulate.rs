//! `gpufill simulate`: the real fill loop against the simulated GPU, in virtual time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpufill_core::sim::{
    Arrivals, Churn, ChurnReport, ForeignJob, LongRunStats, Period, SimConfig, SimGpu, Simulation,
    tracking,
};
use gpufill_core::{State, Tick, Time, TimeOfDay};

use crate::UsageError;
use crate::cli::SimulateArgs;
use crate::config::{Config, MetricChoice};
use crate::live::{DayClock, Live};
use crate::metrics::{self, GpuLabels};
use crate::reload::Reloader;

/// The labels of the simulated GPU's series.
fn sim_labels() -> GpuLabels {
    GpuLabels {
        index: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000".to_owned(),
        model: "simulated GPU".to_owned(),
    }
}

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
    // Issue 14: the view from inside a PID namespace of our own.
    let sim_cfg = if args.pid_namespace {
        sim_cfg.pid_namespace()
    } else {
        sim_cfg
    };
    let sm = config.metric == MetricChoice::Sm;
    let settings = gpufill_core::FillSettings {
        shaping: config.metric.shaping(sim_cfg.sm_count, config.load.kernel),
        ..config.fill_settings()
    };
    let mut sim = Simulation::with_gpu(
        SimGpu::new(sim_cfg),
        sm,
        settings,
        config.yield_settings_with(args.mps),
        config.controller_kind().build(),
        config.tick(),
    );
    let publisher = metrics::start_endpoint(config.metrics.addr(), vec![sim_labels()])?.pop();
    // Virtual time of day: the start plus virtual time (at --realtime, the wall clock).
    let start_time = args
        .start_time
        .or_else(crate::localtime::now)
        .unwrap_or(TimeOfDay::MIDNIGHT);
    let mut live = Live::new(config, args.mps, DayClock::StartingAt(start_time))
        .with_publisher(publisher.flatten().map(|p| p.measuring_sm_activity(sm)));
    let mut reloader = match &args.flags.config {
        Some(path) => Some(Reloader::install(
            Some(path.clone()),
            args.flags.overrides(),
            config.clone(),
        )?),
        None => None,
    };
    let mut csv = match &args.csv {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = BufWriter::new(file);
            if sm {
                writeln!(w, "t_s,target,sm,duty,width,state")?;
            } else {
                writeln!(w, "t_s,target,util,duty,state")?;
            }
            Some((w, path))
        }
        None => None,
    };
    if !config.schedule.window.is_empty() {
        writeln!(out, "time of day at the start: {start_time}")?;
    }
    if sm {
        writeln!(
            out,
            "{:>8} {:>7} {:>6} {:>6} {:>6}  {:<9} foreign",
            "t_s", "target", "sm", "duty", "width", "state"
        )?;
    } else {
        writeln!(
            out,
            "{:>8} {:>7} {:>6} {:>6}  {:<9} foreign",
            "t_s", "target", "util", "duty", "state"
        )?;
    }
    let every = Time::from_secs_f64(args.every).since_epoch();
    let mut next_row = Time::ZERO;
    let mut io_result = Ok(());
    let end = Time::from_secs_f64(args.duration);
    let mut arrivals = Arrivals::new(
        args.seed,
        args.random_foreign.unwrap_or(0.0),
        (Duration::from_secs(10), Duration::from_secs(600)),
        Time::ZERO,
    );
    // Tracking is judged up to the first foreign arrival, where the target stops being
    // ours to hold, and in runs over an hour within the first hour (the hourly table
    // covers the rest); only the ticks judged are kept, in long runs only those with a
    // sample or a new target, so memory does not grow with the duration.
    let long = args.duration > 3600.0;
    let judged_s = args
        .foreign
        .iter()
        .map(|f| f.start_s)
        .fold(args.duration.min(arrivals.next_at()), f64::min);
    let judged_until = Time::from_secs_f64(if long { judged_s.min(3600.0) } else { judged_s });
    let mut ticks: Vec<Tick> = Vec::new();
    let mut hours = LongRunStats::new(Duration::from_secs(3600), Duration::from_secs(3));
    let mut churn = Churn::new(&mut arrivals);
    let mut last_state = None;
    let wall_start = Instant::now();
    let mut stopped = false;
    while sim.now() < end && !stopped {
        if let Some(new) = reloader.as_mut().and_then(Reloader::poll) {
            live.apply(sim.fill_mut(), &new);
        }
        let now = sim.now();
        churn.before_tick(&sim);
        live.before_step(sim.fill_mut(), now);
        let mut stepped = None;
        sim.run_until(now + config.tick(), |tick| {
            if let Some((w, _)) = csv.as_mut().filter(|_| io_result.is_ok()) {
                io_result = write_csv_row(w, tick, sm);
            }
            if tick.at >= next_row {
                let _ = write_row(out, tick, sm);
                next_row += every;
            }
            live.after_step(tick, || (None, None));
            stopped = tick.state == State::Stopped;
            last_state = Some((tick.at, tick.state));
            hours.record(tick);
            let new_target = ticks.last().is_none_or(|t| t.target != tick.target);
            if tick.at < judged_until && (!long || tick.sample.is_some() || new_target) {
                ticks.push(tick.clone());
            }
            stepped = Some(tick.clone());
        });
        if let Some(tick) = stepped {
            churn.after_tick(&sim, &tick);
        }
        if args.realtime {
            let due = wall_start + sim.now().since_epoch();
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
    io_result.context("cannot write the CSV file")?;
    if let Some((mut w, path)) = csv {
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let churn = churn.finish(&sim);
    summarize(out, &sim, &ticks, judged_until, args, sm)?;
    if args.random_foreign.is_some() || long {
        write_long_run(out, &churn, hours.periods())?;
    }
    if let Some((at, State::Stopped)) = last_state {
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

fn write_csv_row(w: &mut dyn Write, t: &Tick, sm: bool) -> std::io::Result<()> {
    if sm {
        return writeln!(
            w,
            "{:.3},{:.1},{},{:.2},{},{}",
            t.at.as_secs_f64(),
            t.target.percent(),
            percent(t.util),
            t.duty.percent(),
            t.width.get(),
            t.state.as_str()
        );
    }
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

fn write_row(out: &mut dyn Write, t: &Tick, sm: bool) -> std::io::Result<()> {
    if sm {
        return writeln!(
            out,
            "{:>8.2} {:>7.1} {:>6} {:>6.1} {:>6}  {:<9} {}",
            t.at.as_secs_f64(),
            t.target.percent(),
            percent(t.util),
            t.duty.percent(),
            t.width.get(),
            t.state.as_str(),
            t.foreign
        );
    }
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

fn write_width_summary(
    out: &mut dyn Write,
    ticks: &[Tick],
    settle: Option<Duration>,
) -> std::io::Result<()> {
    let from = Time::ZERO + settle.unwrap_or_default();
    let filling: Vec<u32> = ticks
        .iter()
        .filter(|t| t.at >= from && t.state == gpufill_core::State::Filling)
        .map(|t| t.width.get())
        .collect();
    let changes = filling.windows(2).filter(|w| w[0] != w[1]).count();
    match (filling.iter().min(), filling.iter().max()) {
        (Some(lo), Some(hi)) => writeln!(
            out,
            "width after settling: {lo}-{hi} blocks (one per SM), {changes} changes"
        ),
        _ => Ok(()),
    }
}

fn summarize(
    out: &mut dyn Write,
    sim: &Simulation,
    ticks: &[Tick],
    until: Time,
    args: &SimulateArgs,
    sm: bool,
) -> anyhow::Result<()> {
    let end = sim.now().max(Time::from_secs_f64(args.duration));
    // A schedule may change the target: judge from its last change before `until`.
    let (from, target) = ticks
        .iter()
        .take_while(|t| t.at < until)
        .fold(
            None,
            |last: Option<(Time, gpufill_core::Utilization)>, t| match last {
                Some((_, target)) if target == t.target => last,
                _ => Some((t.at, t.target)),
            },
        )
        .unwrap_or((Time::ZERO, gpufill_core::Utilization::ZERO));
    let t = tracking(ticks, from, until, target, 2.0);
    writeln!(out)?;
    if from > Time::ZERO {
        writeln!(
            out,
            "the schedule last changed the target at {:.2} s: judged from there",
            from.as_secs_f64()
        )?;
    }
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
    if sm {
        write_width_summary(out, ticks, t.settle)?;
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
