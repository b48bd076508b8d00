//! `gpufill simulate`: the real fill loop against the simulated GPU, in virtual time.
//!
//! It ends early, with the summary of what ran and exit 0, at SIGINT or SIGTERM (as
//! `run` does); and at once when its table cannot be written: a reader that has gone
//! (`| head -1`) ends it quietly (exit 0), any other write error is an error (exit 1).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpufill_core::Tick;
use gpufill_runtime::simulate::{Hooks, Rows, Scenario, SimRun};
use gpufill_runtime::{GpuLabels, PidView, Publisher, Registry, Settings, Time, TimeOfDay};
use gpufill_sim::MAX_RANDOM_JOBS_PER_HOUR;

use crate::cli::{MAX_SIMULATED_S, SimulateArgs};
use crate::config::Config;
use crate::error::UsageError;
use crate::reload::Reloader;

/// The labels of the simulated GPU's series.
fn sim_labels() -> GpuLabels {
    GpuLabels {
        index: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000".to_owned(),
        model: "simulated GPU".to_owned(),
    }
}

/// The context of an error writing the table.
const STDOUT: &str = "cannot write to standard output";

/// The most random foreign jobs a simulated hour may bring: the simulator's own limit.
pub const MAX_ARRIVALS_PER_HOUR: f64 = MAX_RANDOM_JOBS_PER_HOUR;

fn check_args(args: &SimulateArgs) -> Result<(), UsageError> {
    let fail = |m: String| Err(UsageError(anyhow::anyhow!(m)));
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= MAX_SIMULATED_S) {
        return fail(format!(
            "--duration must be more than 0 and at most {MAX_SIMULATED_S} seconds (30 days), got {}",
            args.duration
        ));
    }
    if !(args.every.is_finite() && args.every > 0.0 && args.every <= MAX_SIMULATED_S) {
        return fail(format!(
            "--every must be more than 0 and at most {MAX_SIMULATED_S} seconds, got {}",
            args.every
        ));
    }
    if let Some(rate) = args
        .random_foreign
        .filter(|r| !(r.is_finite() && (0.0..=MAX_ARRIVALS_PER_HOUR).contains(r)))
    {
        return fail(format!(
            "--random-foreign must be between 0 and {MAX_ARRIVALS_PER_HOUR} per hour (one a second), got {rate}"
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

/// Runs the simulation described by `args` and `config`, printing a table to `out`, then
/// the summary: [`gpufill_runtime::simulate`] runs it and judges it.
///
/// # Errors
/// [`UsageError`] for bad flags; the metrics address cannot be bound, a signal handler
/// cannot be installed, or the CSV file cannot be created; writing the table or the CSV
/// failed; the simulated loop stopped.
pub fn run(args: &SimulateArgs, config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    check_args(args)?;
    let scenario = scenario(args);
    let stop = Arc::new(AtomicBool::new(false));
    crate::run::register_stop(&stop)?;
    // Virtual time of day: the start plus virtual time (at --realtime, the wall clock).
    let start_time = args
        .start_time
        .or_else(gpufill_runtime::local_time_of_day)
        .unwrap_or(TimeOfDay::MIDNIGHT);
    let publisher = start_metrics(args, config)?;
    let mut sim = SimRun::new(&scenario, config.to_settings(), start_time, publisher);
    // SIGHUP re-reads --config; without one it only says there is nothing to reload.
    let reloader = Reloader::install(
        args.flags.config.clone(),
        args.flags.overrides(),
        config.clone(),
    )?;
    let csv = match &args.csv {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            Some((BufWriter::new(file), path.clone()))
        }
        None => None,
    };
    let mut table = Table {
        out,
        csv,
        rows: Rows::new(sim.measures_sm()),
        every: Time::from_secs_f64(args.every).since_epoch(),
        next_row: Time::ZERO,
        out_result: Ok(()),
        io_result: Ok(()),
        stop,
        reloader,
        realtime: None,
    };
    let windows = !sim.settings().schedule.windows.is_empty();
    table
        .write_header(windows.then_some(start_time))
        .context(STDOUT)?;
    table.realtime = args.realtime.then(Instant::now);
    let recorded = sim.drive(&scenario, &mut table);
    let out = table.finish()?;
    let report = sim.report(&scenario, &recorded);
    write!(out, "{report}").context(STDOUT)?;
    if let Some(at) = report.stopped_at {
        bail!("the simulated loop stopped at {:.2} s", at.as_secs_f64());
    }
    Ok(())
}

/// The run that `args` describe.
fn scenario(args: &SimulateArgs) -> Scenario {
    Scenario {
        duration_s: args.duration,
        foreign: args.foreign.clone(),
        service: args.service.clone(),
        training: args.training.clone(),
        sample_ms: args.sample_ms,
        mps: args.mps,
        mps_quit_at: args.mps_quit_at,
        pid_namespace: args.pid_namespace,
        host_jitter: args.host_jitter,
        random_foreign: args.random_foreign,
        seed: args.seed,
    }
}

/// The metrics endpoint (with `metrics.addr`), and the publisher of the simulated GPU's
/// series.
fn start_metrics(args: &SimulateArgs, config: &Config) -> anyhow::Result<Option<Publisher>> {
    let (registry, mut publishers) = Registry::new(vec![sim_labels()]);
    let view = if args.pid_namespace {
        PidView::Namespace
    } else {
        PidView::Host
    };
    // A simulated MPS server makes the simulated gpufill one of its clients.
    let process = crate::metrics::Process {
        mps_client: args.mps,
        ..crate::metrics::this_process(view)
    };
    crate::metrics::start_endpoint(config.metrics.addr(), registry, process)?;
    Ok(config.metrics.addr().and(publishers.pop()))
}

/// The table and the CSV file a run writes as it goes, the signals that stop it, and
/// the reloads and pace it takes.
struct Table<'a> {
    out: &'a mut dyn Write,
    csv: Option<(BufWriter<File>, PathBuf)>,
    rows: Rows,
    every: Duration,
    next_row: Time,
    /// The first error writing `out` (it ends the run), then the CSV file's.
    out_result: std::io::Result<()>,
    io_result: std::io::Result<()>,
    /// Set by SIGINT and SIGTERM: stop, and report what ran.
    stop: Arc<AtomicBool>,
    reloader: Reloader,
    /// With --realtime: when virtual time zero was on the wall clock.
    realtime: Option<Instant>,
}

impl<'a> Table<'a> {
    /// The CSV's header and the table's, after the time of day at the start (given when
    /// a schedule has windows).
    fn write_header(&mut self, start_time: Option<TimeOfDay>) -> std::io::Result<()> {
        if let Some((w, _)) = self.csv.as_mut() {
            self.rows.write_csv_header(w)?;
        }
        self.rows.write_header(self.out, start_time)
    }

    /// The first write error, or the CSV file flushed; then `out` again for the summary.
    ///
    /// # Errors
    /// Writing the table (a reader that has gone: [`crate::error::is_broken_pipe`]) or
    /// the CSV file failed.
    fn finish(self) -> anyhow::Result<&'a mut dyn Write> {
        self.out_result.context(STDOUT)?;
        self.io_result.context("cannot write the CSV file")?;
        if let Some((mut w, path)) = self.csv {
            w.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(self.out)
    }
}

impl Hooks for Table<'_> {
    fn stop(&mut self) -> bool {
        self.out_result.is_err() || self.stop.load(Ordering::Relaxed)
    }

    fn reload(&mut self) -> Option<Settings> {
        self.reloader.poll().map(|c| c.to_settings())
    }

    fn tick(&mut self, tick: &Tick) {
        if let Some((w, _)) = self.csv.as_mut().filter(|_| self.io_result.is_ok()) {
            self.io_result = self.rows.write_csv_row(w, tick);
        }
        if tick.at >= self.next_row && self.out_result.is_ok() {
            self.out_result = self.rows.write_row(self.out, tick);
            self.next_row += self.every;
        }
    }

    fn stepped(&mut self, now: Time) {
        if let Some(wall_start) = self.realtime {
            let due = wall_start + now.since_epoch();
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
}
