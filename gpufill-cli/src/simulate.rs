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
use gpufill_core::{Event, Tick, Utilization};
use gpufill_runtime::mps::{MpsFollower, SimDaemon};
use gpufill_runtime::{
    DayClock, GpuLabels, Metric, PidView, Registry, Settings, State, Steering, Time, TimeOfDay,
    with_launch_settings,
};
use gpufill_sim::{
    Arrivals, Churn, ChurnReport, ForeignJob, ForeignReport, HostJitter, LongRunStats,
    MAX_RANDOM_JOBS_PER_HOUR, Period, SimConfig, SimGpu, Simulation, tracking,
};

use crate::cli::{MAX_SIMULATED_S, ServiceRequests, ServiceSpec, SimulateArgs, TrainingSpec};
use crate::config::Config;

/// How busy a `--service` keeps the GPU inside a burst: ResNet-50 requests at batch 1
/// are CPU-bound, about 0.4 (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps).
const SERVICE_LOAD: f64 = 0.4;
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

/// Runs the simulation described by `args` and `config`, printing a table to `out`:
/// [`Setup::new`] builds it, [`drive`] runs it, [`report`] summarizes it.
///
/// # Errors
/// [`UsageError`] for bad flags; I/O errors writing the CSV.
pub fn run(args: &SimulateArgs, config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    check_args(args)?;
    let mut setup = Setup::new(args, config)?;
    setup.write_header(out).context(STDOUT)?;
    let recorded = drive(&mut setup, args, out)?;
    report(out, &setup, &recorded, args)
}

/// Everything a simulation runs with.
pub struct Setup {
    sim: Simulation,
    /// Set by SIGINT and SIGTERM: stop, and report what ran.
    stop: Arc<AtomicBool>,
    steering: Steering,
    reloader: Option<Reloader>,
    settings: Settings,
    csv: Option<(BufWriter<File>, PathBuf)>,
    sm: bool,
    start_time: TimeOfDay,
    /// With `--mps`: the simulated daemon, as gpufill follows it.
    mps: Option<MpsFollower>,
    sm_count: u32,
}

impl Setup {
    /// The simulated GPU, its loop, the steering (schedule, metrics), the reloader
    /// (with `--config`) and the CSV file.
    ///
    /// # Errors
    /// The metrics address cannot be bound, a signal handler cannot be installed, or
    /// the CSV file cannot be created.
    pub fn new(args: &SimulateArgs, config: &Config) -> anyhow::Result<Setup> {
        let stop = Arc::new(AtomicBool::new(false));
        crate::run::register_stop(&stop)?;
        let settings = config.to_settings();
        let sim_cfg = sim_config(args, &settings);
        let sim_cfg_sm_count = sim_cfg.sm_count;
        let sm = settings.metric == Metric::Sm;
        let recipe = settings.loop_settings(sim_cfg.sm_count, args.mps);
        let sim = Simulation::with_gpu(SimGpu::new(sim_cfg), sm, &recipe, settings.tick());
        // Virtual time of day: the start plus virtual time (at --realtime, the wall clock).
        let start_time = args
            .start_time
            .or_else(gpufill_runtime::local_time_of_day)
            .unwrap_or(TimeOfDay::MIDNIGHT);
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
        let publisher = config
            .metrics
            .addr()
            .and(publishers.pop())
            .map(|p| p.measuring_sm_activity(sm));
        let steering = Steering::new(&settings, args.mps, DayClock::StartingAt(start_time))
            .with_publisher(publisher);
        // SIGHUP re-reads --config; without one it only says there is nothing to reload.
        let reloader = Some(Reloader::install(
            args.flags.config.clone(),
            args.flags.overrides(),
            config.clone(),
        )?);
        let csv = match &args.csv {
            Some(path) => {
                let file = File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                Some((BufWriter::new(file), path.clone()))
            }
            None => None,
        };
        let mps = args
            .mps
            .then(|| MpsFollower::new(SimDaemon::new(args.mps_quit_at.map(Time::from_secs_f64))));
        Ok(Setup {
            sim,
            stop,
            steering,
            reloader,
            settings,
            csv,
            sm,
            start_time,
            mps,
            sm_count: sim_cfg_sm_count,
        })
    }

    fn write_header(&mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        if let Some((w, _)) = self.csv.as_mut() {
            if self.sm {
                writeln!(w, "t_s,target,sm,duty,width,state")?;
            } else {
                writeln!(w, "t_s,target,util,duty,state")?;
            }
        }
        if !self.settings.schedule.windows.is_empty() {
            writeln!(out, "time of day at the start: {}", self.start_time)?;
        }
        if self.sm {
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
        Ok(())
    }

    /// Follows the simulated MPS daemon at `now`: once it is told to quit, our loop
    /// leaves it and starts afresh without MPS, as `gpufill run` restarts.
    fn follow_mps(&mut self, now: Time) {
        let Some(follower) = self.mps.as_mut() else {
            return;
        };
        if follower.leaves_at(self.sim.gpu(), now) {
            let recipe = self.settings.loop_settings(self.sm_count, false);
            self.sim.restart_without_mps(self.sm, &recipe);
            self.steering.set_mps(false);
        }
    }

    fn reload(&mut self) {
        let Some(new) = self.reloader.as_mut().and_then(Reloader::poll) else {
            return;
        };
        let (settings, _) = self.settings.live_update(new.to_settings());
        self.steering.apply(self.sim.fill_mut(), &settings);
        self.settings = settings;
    }
}

/// The simulated GPU of `args`: its foreign jobs and services, NVML's sampling, MPS and
/// the PID view, and our kernels laid out as `settings` say (`load.period_ms`,
/// `load.max_kernel_us`, `load.beside_kernel_us`), as the CUDA launcher lays them.
pub fn sim_config(args: &SimulateArgs, settings: &Settings) -> SimConfig {
    let services = args.service.iter().map(|v| match v.requests {
        ServiceRequests::Bursts { every_s, burst_s } => ForeignJob::service(
            v.start_s,
            v.end_s,
            Duration::from_secs_f64(every_s),
            Duration::from_secs_f64(burst_s),
            SERVICE_LOAD,
        ),
        ServiceRequests::Rate {
            per_s,
            request_ms,
            fills_every_sm,
        } => {
            let job = ForeignJob::isolated_requests(
                v.start_s,
                v.end_s,
                per_s,
                Duration::from_secs_f64(request_ms / 1e3),
            );
            if fills_every_sm {
                job.filling_every_sm()
            } else {
                job
            }
        }
    });
    let cfg = with_launch_settings(
        SimConfig {
            sample_period: Duration::from_millis(args.sample_ms),
            mps: args.mps,
            foreign: args
                .foreign
                .iter()
                .map(|f| ForeignJob::compute_bound(f.start_s, f.end_s, f.load_percent / 100.0))
                .chain(services)
                .chain(args.training.iter().map(training_job))
                .collect(),
            // As measured (the constant's docs): a service's bursts shorter than this
            // never appear in its per-process samples.
            process_sample_min_run: SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN,
            host_jitter: args.host_jitter.then(|| HostJitter::seeded(args.seed)),
            ..SimConfig::default()
        },
        settings,
    );
    // The view from inside a PID namespace of our own (issue 14).
    if args.pid_namespace {
        cfg.pid_namespace()
    } else {
        cfg
    }
}

/// The job of a `--training` ([`ForeignJob::training`]).
fn training_job(spec: &TrainingSpec) -> ForeignJob {
    ForeignJob::training(
        spec.start_s,
        spec.end_s,
        Duration::from_secs_f64(spec.step_ms / 1e3),
        Duration::from_secs_f64(spec.wait_ms / 1e3),
    )
}

/// What a run kept for its report.
pub struct Recorded {
    ticks: Vec<Tick>,
    judged_until: Time,
    /// Pauses over the whole run, and signs of our kernels taken for the host's jitter.
    pauses: usize,
    unexplained: usize,
    hours: Vec<Period>,
    churn: ChurnReport,
    last_state: Option<(Time, State)>,
}

/// Steps the loop in virtual time to `--duration` (or until the loop stops, or a
/// SIGINT or SIGTERM), writing table rows and CSV lines as it goes, and keeps what the
/// report needs.
///
/// # Errors
/// Writing the table to `out` (a reader that has gone: [`crate::error::is_broken_pipe`]) or
/// the CSV file failed; either ends the run at once.
pub fn drive(
    setup: &mut Setup,
    args: &SimulateArgs,
    out: &mut dyn Write,
) -> anyhow::Result<Recorded> {
    let (sm, tick_len) = (setup.sm, setup.settings.tick());
    let every = Time::from_secs_f64(args.every).since_epoch();
    let mut next_row = Time::ZERO;
    let mut io_result = Ok(());
    let mut out_result = Ok(());
    let end = Time::from_secs_f64(args.duration);
    let mut arrivals = Arrivals::new(
        args.seed,
        args.random_foreign.unwrap_or(0.0),
        (Duration::from_secs(10), Duration::from_secs(600)),
        Time::ZERO,
    );
    // Tracking is judged up to the first foreign arrival, where the target stops being
    // ours to hold, and in runs over an hour within the first hour (the hourly table
    // covers the rest). Only the ticks the report reads are kept: those with a sample,
    // a new target or a new width, so memory grows with the samples (5 a second at the
    // default sampling), not with the ticks.
    let long = args.duration > 3600.0;
    let judged_s = args
        .foreign
        .iter()
        .map(|f| f.start_s)
        .chain(args.service.iter().map(|v| v.start_s))
        .chain(args.training.iter().map(|v| v.start_s))
        .fold(args.duration.min(arrivals.next_at()), f64::min);
    let judged_until = Time::from_secs_f64(if long { judged_s.min(3600.0) } else { judged_s });
    let mut ticks: Vec<Tick> = Vec::new();
    let (mut pauses, mut unexplained) = (0, 0);
    let mut hours = LongRunStats::new(Duration::from_secs(3600), Duration::from_secs(3));
    let mut churn = Churn::new(&mut arrivals);
    let mut last_state = None;
    let wall_start = Instant::now();
    let mut stopped = false;
    while setup.sim.now() < end && !stopped && out_result.is_ok() {
        if setup.stop.load(Ordering::Relaxed) {
            break;
        }
        setup.reload();
        let now = setup.sim.now();
        setup.follow_mps(now);
        churn.before_tick(&setup.sim);
        setup.steering.before_step(setup.sim.fill_mut(), now);
        let mut stepped = None;
        let (csv, steering) = (&mut setup.csv, &mut setup.steering);
        setup.sim.run_until(now + tick_len, |tick| {
            if let Some((w, _)) = csv.as_mut().filter(|_| io_result.is_ok()) {
                io_result = write_csv_row(w, tick, sm);
            }
            if tick.at >= next_row && out_result.is_ok() {
                out_result = write_row(out, tick, sm);
                next_row += every;
            }
            steering.after_step(tick, || (None, None));
            stopped = tick.state == State::Stopped;
            last_state = Some((tick.at, tick.state));
            hours.record(tick);
            for e in &tick.events {
                pauses += usize::from(matches!(e, Event::Paused { .. }));
                unexplained += usize::from(matches!(e, Event::Unexplained { .. }));
            }
            let new_shape = ticks.last().is_none_or(|t| {
                t.target != tick.target || t.width != tick.width || t.state != tick.state
            });
            if tick.at < judged_until && (tick.sample.is_some() || new_shape) {
                ticks.push(tick.clone());
            }
            stepped = Some(tick.clone());
        });
        if let Some(tick) = stepped {
            churn.after_tick(&setup.sim, &tick);
        }
        if args.realtime {
            let due = wall_start + setup.sim.now().since_epoch();
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
    out_result.context(STDOUT)?;
    io_result.context("cannot write the CSV file")?;
    if let Some((w, path)) = setup.csv.as_mut() {
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Recorded {
        ticks,
        judged_until,
        pauses,
        unexplained,
        hours: hours.periods().to_vec(),
        churn: churn.finish(&setup.sim),
        last_state,
    })
}

/// Prints the tracking summary, the foreign jobs' report and, for long or churning
/// runs, the hourly table.
///
/// # Errors
/// Writing to `out` failed, or the simulated loop stopped.
pub fn report(
    out: &mut dyn Write,
    setup: &Setup,
    recorded: &Recorded,
    args: &SimulateArgs,
) -> anyhow::Result<()> {
    summarize(out, &setup.sim, recorded, args, setup.sm).context(STDOUT)?;
    if let Some(follower) = setup.mps.as_ref() {
        write_mps(out, follower).context(STDOUT)?;
    }
    if args.random_foreign.is_some() || args.duration > 3600.0 {
        write_long_run(out, &recorded.churn, &recorded.hours).context(STDOUT)?;
    }
    if let Some((at, State::Stopped)) = recorded.last_state {
        bail!("the simulated loop stopped at {:.2} s", at.as_secs_f64());
    }
    Ok(())
}

/// What became of the simulated MPS daemon told to quit, and of our client.
fn write_mps(out: &mut dyn Write, follower: &MpsFollower) -> std::io::Result<()> {
    let Some(quit) = follower.daemon().quit_at() else {
        return Ok(());
    };
    let secs = |t: Option<Time>| {
        t.map_or_else(
            || "not within the run".to_owned(),
            |t| format!("at {:.2} s", t.as_secs_f64()),
        )
    };
    writeln!(
        out,
        "MPS: daemon told to quit at {:.2} s; gpufill left it {} (then without MPS, under its yield policy); the daemon exited {}",
        quit.as_secs_f64(),
        secs(follower.left_at()),
        secs(follower.daemon().gone_at()),
    )
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

fn percent(u: Option<Utilization>) -> String {
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
        .filter(|t| t.at >= from && t.state == State::Filling)
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
    recorded: &Recorded,
    args: &SimulateArgs,
    sm: bool,
) -> anyhow::Result<()> {
    let (ticks, until) = (&recorded.ticks[..], recorded.judged_until);
    let end = sim.now().max(Time::from_secs_f64(args.duration));
    // A schedule may change the target: judge from its last change before `until`.
    let (from, target) = ticks
        .iter()
        .take_while(|t| t.at < until)
        .fold(None, |last: Option<(Time, Utilization)>, t| match last {
            Some((_, target)) if target == t.target => last,
            _ => Some((t.at, t.target)),
        })
        .unwrap_or((Time::ZERO, Utilization::ZERO));
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
    write_pauses(out, recorded, report.host_stalls)?;
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
    let services = report.foreign.iter().skip(args.foreign.len());
    for (spec, job) in args.service.iter().zip(services) {
        write_service(out, spec, job)?;
    }
    let trainers = report
        .foreign
        .iter()
        .skip(args.foreign.len() + args.service.len());
    for (spec, job) in args.training.iter().zip(trainers) {
        write_training(out, spec, job)?;
    }
    Ok(())
}

/// A training job's line: how much longer a step and its wait took than alone
/// ("slowed by": its step rate), from what our kernels charged its steps, and our
/// kernels' time beside its work.
fn write_training(
    out: &mut dyn Write,
    spec: &TrainingSpec,
    job: &ForeignReport,
) -> std::io::Result<()> {
    let r = job.requests.clone().unwrap_or_default();
    let wait = Duration::from_secs_f64(spec.wait_ms / 1e3);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    writeln!(
        out,
        "training {}-{} s, steps of {} ms busy then {} ms on its input: slowed by {:.2}% (a step {:.3} ms against {:.3} ms alone, on the mean; {} steps, {} held up by a kernel of ours, {} by a context switch), our kernels resident beside it for {:.1} ms",
        spec.start_s,
        spec.end_s,
        spec.step_ms,
        spec.wait_ms,
        r.rate_slowdown(wait) * 100.0,
        ms(r.mean),
        ms(r.mean_alone),
        r.count,
        r.met_kernel,
        r.switched,
        ms(job.overlap),
    )
}

/// The pauses of the run (a quiet holder's work, or a sign of our kernels), how many
/// signs of our kernels were taken for the host's own jitter, and with --host-jitter how
/// often the host stalled.
fn write_pauses(
    out: &mut dyn Write,
    recorded: &Recorded,
    host_stalls: Option<(u64, u64)>,
) -> std::io::Result<()> {
    let (pauses, unexplained) = (recorded.pauses, recorded.unexplained);
    write!(out, "{pauses} pauses")?;
    if unexplained > 0 {
        write!(
            out,
            "; {unexplained} signs of our kernels with nobody else there, taken as the host's own jitter"
        )?;
    }
    writeln!(out)?;
    if let Some((groups, stalls)) = host_stalls {
        writeln!(
            out,
            "host jitter: {stalls} of {groups} groups of our kernels stalled on the host"
        )?;
    }
    Ok(())
}

/// A service's line: its requests' median latency against alone ("slowed by"), the
/// mean and p99, how many met our kernels, and our kernels' time beside its work.
fn write_service(
    out: &mut dyn Write,
    spec: &ServiceSpec,
    job: &ForeignReport,
) -> std::io::Result<()> {
    let what = match spec.requests {
        ServiceRequests::Bursts { every_s, burst_s } => {
            format!("a {burst_s} s burst every {every_s} s")
        }
        ServiceRequests::Rate {
            per_s,
            request_ms,
            fills_every_sm,
        } => {
            let noun = if per_s == 1.0 { "request" } else { "requests" };
            let gpu = if fills_every_sm {
                ", filling every SM"
            } else {
                ""
            };
            format!("{per_s} {noun}/s of {request_ms} ms{gpu}")
        }
    };
    let r = job.requests.clone().unwrap_or_default();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    writeln!(
        out,
        "service {}-{} s, {what}: requests slowed by {:.2}% (median {:.3} ms against {:.3} ms alone; mean {:+.2}%, p99 {:+.3} ms; {} requests, {} held up by a kernel of ours, {} by a context switch), our kernels resident beside it for {:.1} ms",
        spec.start_s,
        spec.end_s,
        r.slowdown() * 100.0,
        ms(r.median),
        ms(r.median_alone),
        r.mean_slowdown() * 100.0,
        ms(r.p99) - ms(r.p99_alone),
        r.count,
        r.met_kernel,
        r.switched,
        ms(job.overlap),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(extra: &[&str]) -> SimulateArgs {
        let argv = ["gpufill", "simulate"].iter().chain(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Simulate(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn services_become_jobs_that_serve_requests() {
        let settings = Config::default().to_settings();
        let cfg = sim_config(
            &args(&["--service", "2-60:6:0.17", "--service", "3-9:20/s:0.5ms"]),
            &settings,
        );
        let [bursts, isolated] = &cfg.foreign[..] else {
            panic!("{:?}", cfg.foreign);
        };
        assert_eq!(bursts.requests, Some(gpufill_sim::Requests::InBursts));
        assert_eq!(bursts.windows.len(), 10);
        assert_eq!(isolated.request, Duration::from_micros(500));
        assert!(matches!(
            isolated.requests,
            Some(gpufill_sim::Requests::Rate { per_s, .. }) if per_s == 20.0
        ));
    }
}
