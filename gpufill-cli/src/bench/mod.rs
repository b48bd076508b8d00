//! `gpufill bench`: tracking, memory, power and yield, measured on the user's own GPU
//! (or on the simulated GPU with `--sim`), with a progress bar, a table and files.
//!
//! The bench drives one fill loop through a `Rig`: the real one (`real`: NVML and
//! CUDA on the real clock, with a foreign CUDA process started from this binary) or
//! the simulated one (`sim`: virtual time). Everything after the measurement (the
//! summary maths in [`summary`], the plot in [`svg`], the CSV and JSON) is the same
//! for both, so `--sim` tests the whole command in CI.
//!
//! Phases, all on one time axis:
//! 1. each target for `--seconds`, one after the other without stopping;
//! 2. the yield test at the last target: 2 s of filling, then a foreign CUDA process
//!    (`gpufill bench-foreign`) runs for 3 s; the bench times its appearance in NVML's
//!    list, gpufill's yield, its exit and gpufill filling again; then 2 s of filling.

pub mod foreign;
mod real;
mod sim;
pub mod summary;
pub mod svg;

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use gpufill_core::{Tick, Utilization};
use gpufill_runtime::{State, Time};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::BenchArgs;
use crate::error::UsageError;
use gpufill_runtime::{Metric, Settings};

use crate::config::Config;
use summary::{BenchSummary, YieldObservation, summarize_target, summarize_yield};

/// How long the foreign process of the yield test runs.
const FOREIGN_RUN: Duration = Duration::from_secs(3);
/// Filling before the foreign process starts, and after gpufill fills again.
const YIELD_MARGIN: Duration = Duration::from_secs(2);
/// Power is read this often (NVML's board power is itself an average).
const POWER_EVERY: Duration = Duration::from_millis(100);
/// Own memory is read this often.
const MEMORY_EVERY: Duration = Duration::from_secs(1);

/// What the bench sees of the foreign process.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ForeignSeen {
    /// First listed by NVML.
    pub listed: Option<Time>,
    /// No longer listed, after having been.
    pub unlisted: Option<Time>,
    /// Exited.
    pub exited: Option<Time>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
}

/// A GPU to bench, real or simulated, with its fill loop.
pub(crate) trait Rig {
    /// The GPU, for the table.
    fn name(&self) -> String;
    /// The rig's time now.
    fn now(&self) -> Time;
    /// Steps the fill loop once at `target`.
    fn step(&mut self, target: Utilization) -> anyhow::Result<Tick>;
    /// Waits until the next tick is due.
    fn wait(&mut self);
    /// Board power now, W.
    fn power_watts(&mut self) -> Option<f64>;
    /// Board power measured before the fill loop started, W.
    fn idle_power_watts(&self) -> Option<f64>;
    /// GPU memory of our own process, MiB.
    fn own_memory_mib(&mut self) -> Option<f64>;
    /// Why the yield test cannot run here, if it cannot.
    fn yield_unsupported(&self) -> Option<String>;
    /// Starts the foreign process for `run`.
    fn start_foreign(&mut self, run: Duration) -> anyhow::Result<()>;
    /// What has been seen of the foreign process so far.
    fn foreign(&mut self) -> ForeignSeen;
    /// Waits until none of our kernels is queued or running; when that was.
    fn quiesce(&mut self) -> Option<Time>;
    /// Our kernels launched so far (real GPU).
    fn kernels_launched(&self) -> Option<u64>;
    /// Time our kernels ran beside the foreign process's (simulated GPU).
    fn overlap(&mut self) -> Option<Duration>;
    /// Leaves the GPU idle and the foreign process ended.
    fn finish(&mut self);
}

/// Everything recorded.
#[derive(Debug, Default)]
struct Recording {
    start: Time,
    ticks: Vec<Tick>,
    power: Vec<(Time, f64)>,
    /// Per target: (target, from, to, largest own memory in MiB).
    windows: Vec<(Utilization, Time, Time, Option<f64>)>,
    /// The yield test: what was seen, and the span to shade.
    yield_test: Option<(Utilization, YieldObservation, Time, Time)>,
    next_power: Time,
    next_memory: Time,
}

impl Recording {
    /// Steps once, recording the tick and, when due, power and memory.
    fn step(
        &mut self,
        rig: &mut dyn Rig,
        target: Utilization,
        memory: &mut Option<f64>,
    ) -> anyhow::Result<Tick> {
        let now = rig.now();
        if now >= self.next_power {
            if let Some(w) = rig.power_watts() {
                self.power.push((now, w));
            }
            self.next_power = now + POWER_EVERY;
        }
        if now >= self.next_memory {
            if let Some(m) = rig.own_memory_mib() {
                *memory = Some(memory.map_or(m, |old| old.max(m)));
            }
            self.next_memory = now + MEMORY_EVERY;
        }
        let tick = rig.step(target)?;
        if tick.state == State::Stopped {
            bail!(
                "stopped filling at {:.2} s: the GPU failed (see the log above)",
                tick.at.saturating_since(self.start).as_secs_f64()
            );
        }
        self.ticks.push(tick.clone());
        Ok(tick)
    }

    /// Holds `target` for `length`.
    fn hold(
        &mut self,
        rig: &mut dyn Rig,
        target: Utilization,
        length: Duration,
        bar: &ProgressBar,
    ) -> anyhow::Result<Option<f64>> {
        let end = rig.now() + length;
        let mut memory = None;
        while rig.now() < end {
            self.step(rig, target, &mut memory)?;
            rig.wait();
            bar.set_position(self.elapsed_ms(rig));
        }
        Ok(memory)
    }

    fn elapsed_ms(&self, rig: &dyn Rig) -> u64 {
        u64::try_from(rig.now().saturating_since(self.start).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Runs `gpufill bench`, printing the table to `out`.
///
/// # Errors
/// [`UsageError`] for bad flags or a GPU that does not exist; runtime errors for a
/// missing driver, a busy GPU (without `--force`), a failed GPU or unwritable files.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let targets = check_args(args)?;
    let config = bench_config(args)?;
    let mut rig: Box<dyn Rig> = if args.sim {
        if let Some(gpu) = &args.gpu {
            tracing::warn!("--gpu {gpu} is not used with --sim: the simulated GPU is measured");
        }
        Box::new(sim::SimRig::new(&config))
    } else {
        Box::new(real::RealRig::open(args, &config)?)
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let bar = progress_bar(args, &targets, &config);
    let recorded = measure(rig.as_mut(), args, &targets, &config, &bar);
    rig.finish();
    bar.finish_and_clear();
    let (recording, skipped) = recorded?;
    let summary = summarize(rig.as_ref(), args, &config, &recording, skipped);
    write_files(&args.out, &rig.name(), &recording, &summary)?;
    summary.write_table(out)?;
    writeln!(
        out,
        "wrote bench.svg, bench.csv and bench.json to {}",
        args.out.display()
    )?;
    if summary.pauses() > 0 {
        bail!(
            "gpufill paused {} times with nobody else on the GPU",
            summary.pauses()
        );
    }
    match &summary.yield_test {
        Some(y) if !y.passed() => bail!("the yield test failed"),
        _ => Ok(()),
    }
}

/// The settings measured: the file's (`--config`), else the defaults. Only the `util`
/// metric can be benched: its readings are what the table and plot show.
fn bench_config(args: &BenchArgs) -> Result<Settings, UsageError> {
    let Some(path) = &args.config else {
        return Ok(Settings::default());
    };
    let config = Config::load(path).map_err(|e| UsageError(e.into()))?;
    if config.metric != Metric::Util {
        return Err(UsageError(anyhow::anyhow!(
            "{}: metric: bench measures metric = \"util\" only",
            path.display()
        )));
    }
    Ok(config.to_settings())
}

fn check_args(args: &BenchArgs) -> Result<Vec<Utilization>, UsageError> {
    let fail = |m: String| Err(UsageError(anyhow::anyhow!(m)));
    if !(args.seconds.is_finite() && (1.0..=3600.0).contains(&args.seconds)) {
        return fail(format!(
            "--seconds must be between 1 and 3600, got {}",
            args.seconds
        ));
    }
    if args.targets.is_empty() || args.targets.len() > 20 {
        return fail(format!(
            "--targets must list 1 to 20 percentages, got {}",
            args.targets.len()
        ));
    }
    args.targets
        .iter()
        .map(|&t| match Utilization::from_percent(t) {
            Ok(u) if t > 0.0 => Ok(u),
            _ => Err(UsageError(anyhow::anyhow!(
                "--targets: each target must be above 0 and at most 100 percent, got {t}"
            ))),
        })
        .collect()
}

fn progress_bar(args: &BenchArgs, targets: &[Utilization], config: &Settings) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let per_target = Duration::from_secs_f64(args.seconds);
    let mut total = per_target * u32::try_from(targets.len()).unwrap_or(u32::MAX);
    if !args.no_yield {
        total += yield_test_length(config);
    }
    let bar = ProgressBar::with_draw_target(
        Some(u64::try_from(total.as_millis()).unwrap_or(u64::MAX)),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = ProgressStyle::with_template("{msg:<16} [{bar:40}] {percent:>3}% eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The expected length of the yield test.
fn yield_test_length(config: &Settings) -> Duration {
    YIELD_MARGIN * 2 + FOREIGN_RUN + config.yield_settings(false).grace
}

fn measure(
    rig: &mut dyn Rig,
    args: &BenchArgs,
    targets: &[Utilization],
    config: &Settings,
    bar: &ProgressBar,
) -> anyhow::Result<(Recording, Option<String>)> {
    let mut rec = Recording {
        start: rig.now(),
        ..Recording::default()
    };
    let per_target = Duration::from_secs_f64(args.seconds);
    for &target in targets {
        bar.set_message(format!("target {:.0}%", target.percent()));
        let from = rig.now();
        let memory = rec.hold(rig, target, per_target, bar)?;
        rec.windows.push((target, from, rig.now(), memory));
    }
    let skipped = if args.no_yield {
        Some("--no-yield".to_owned())
    } else {
        rig.yield_unsupported()
    };
    if skipped.is_none() {
        bar.set_message("yield test");
        let target = *targets.last().unwrap_or(&config.fill_settings().target);
        yield_test(rig, &mut rec, target, config, bar)?;
    }
    Ok((rec, skipped))
}

fn yield_test(
    rig: &mut dyn Rig,
    rec: &mut Recording,
    target: Utilization,
    config: &Settings,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    rec.hold(rig, target, YIELD_MARGIN, bar)?;
    let grace = config.yield_settings(false).grace;
    let spawned = rig.now();
    rig.start_foreign(FOREIGN_RUN)?;
    let deadline = spawned + FOREIGN_RUN + grace + Duration::from_secs(10);
    let mut obs = YieldObservation {
        spawned,
        grace,
        ..YieldObservation::default()
    };
    let (mut at_quiesce, mut at_gone, mut yielded, mut memory) = (None, None, false, None);
    loop {
        let tick = rec.step(rig, target, &mut memory)?;
        bar.set_position(rec.elapsed_ms(rig));
        // Right after the step that went idle, before waiting for the next tick.
        if tick.state == State::Yielding && !yielded {
            yielded = true;
            obs.quiesced = rig.quiesce();
            at_quiesce = rig.kernels_launched();
        }
        let seen = rig.foreign();
        if seen.unlisted.is_some() && at_gone.is_none() {
            at_gone = rig.kernels_launched();
        }
        let gone = seen.exited.or(seen.unlisted);
        (obs.listed, obs.unlisted, obs.exited) = (seen.listed, seen.unlisted, seen.exited);
        if let Some(why) = seen.failure {
            bail!("the foreign process of the yield test failed: {why}");
        }
        let back = gone.is_some_and(|g| tick.at >= g) && yielded && tick.state.fills();
        if back || rig.now() >= deadline {
            break;
        }
        rig.wait();
    }
    obs.kernels = at_quiesce.zip(at_gone);
    obs.overlap = rig.overlap();
    let shade_from = obs.listed.unwrap_or(spawned);
    let shade_to = rig.now();
    rec.hold(rig, target, YIELD_MARGIN, bar)?;
    rec.yield_test = Some((target, obs, shade_from, shade_to));
    Ok(())
}

fn summarize(
    rig: &dyn Rig,
    args: &BenchArgs,
    config: &Settings,
    rec: &Recording,
    yield_skipped: Option<String>,
) -> BenchSummary {
    BenchSummary {
        gpu: rig.name(),
        simulated: args.sim,
        seconds_per_target: args.seconds,
        tick_ms: config.tick_ms,
        idle_power_w: rig.idle_power_watts(),
        targets: rec
            .windows
            .iter()
            .map(|&(target, from, to, memory)| {
                summarize_target(&rec.ticks, from, to, target, &rec.power, memory)
            })
            .collect(),
        yield_test: rec
            .yield_test
            .as_ref()
            .map(|(target, obs, _, _)| summarize_yield(&rec.ticks, *target, obs)),
        yield_skipped,
    }
}

fn write_files(
    dir: &Path,
    gpu: &str,
    rec: &Recording,
    summary: &BenchSummary,
) -> anyhow::Result<()> {
    let create = |name: &str| {
        let path = dir.join(name);
        File::create(&path)
            .map(BufWriter::new)
            .with_context(|| format!("cannot create {}", path.display()))
    };
    let mut csv = create("bench.csv")?;
    write_csv(&mut csv, rec).and_then(|()| csv.flush())?;
    let mut svg = create("bench.svg")?;
    svg.write_all(svg::render(&plot(gpu, rec, summary.simulated)).as_bytes())
        .and_then(|()| svg.flush())?;
    let mut json = create("bench.json")?;
    serde_json::to_writer_pretty(&mut json, summary)?;
    writeln!(json).and_then(|()| json.flush())?;
    Ok(())
}

/// `t_s,target,util,duty,state`, one row per tick; `util` is the NVML sample read in
/// that tick, empty when none arrived.
fn write_csv(w: &mut dyn Write, rec: &Recording) -> std::io::Result<()> {
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

fn plot(gpu: &str, rec: &Recording, simulated: bool) -> svg::Plot {
    let secs = |t: Time| t.saturating_since(rec.start).as_secs_f64();
    svg::Plot {
        title: format!("gpufill bench: {gpu}"),
        util_label: if simulated {
            "simulated (model)"
        } else {
            "measured (NVML)"
        },
        util: rec
            .ticks
            .iter()
            .filter_map(|t| t.sample.map(|s| (secs(t.at), s.percent())))
            .collect(),
        target: rec
            .ticks
            .iter()
            .map(|t| (secs(t.at), t.target.percent()))
            .collect(),
        shaded: rec
            .yield_test
            .iter()
            .map(|(_, _, from, to)| (secs(*from), secs(*to), "yield test".to_owned()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulated GPU, with a launcher counter that can misbehave and a foreign
    /// process that can fail: the parts of the real rig the simulation lacks.
    struct Scripted {
        sim: sim::SimRig,
        kernels: u64,
        launches_while_yielding: bool,
        foreign_fails: bool,
    }

    impl Rig for Scripted {
        fn name(&self) -> String {
            "scripted".into()
        }
        fn now(&self) -> Time {
            self.sim.now()
        }
        fn step(&mut self, target: Utilization) -> anyhow::Result<Tick> {
            let tick = self.sim.step(target)?;
            if tick.state.fills() || self.launches_while_yielding {
                self.kernels += 5;
            }
            Ok(tick)
        }
        fn wait(&mut self) {}
        fn power_watts(&mut self) -> Option<f64> {
            Some(100.0)
        }
        fn idle_power_watts(&self) -> Option<f64> {
            Some(60.0)
        }
        fn own_memory_mib(&mut self) -> Option<f64> {
            Some(254.0)
        }
        fn yield_unsupported(&self) -> Option<String> {
            None
        }
        fn start_foreign(&mut self, run: Duration) -> anyhow::Result<()> {
            self.sim.start_foreign(run)
        }
        fn foreign(&mut self) -> ForeignSeen {
            let mut seen = self.sim.foreign();
            if self.foreign_fails && seen.listed.is_some() {
                seen.failure = Some("exit status: 1: cannot open a CUDA context".into());
            }
            seen
        }
        fn quiesce(&mut self) -> Option<Time> {
            self.sim.quiesce()
        }
        fn kernels_launched(&self) -> Option<u64> {
            Some(self.kernels)
        }
        fn overlap(&mut self) -> Option<Duration> {
            None
        }
        fn finish(&mut self) {}
    }

    fn scripted(launches_while_yielding: bool, foreign_fails: bool) -> Scripted {
        Scripted {
            sim: sim::SimRig::new(&Settings::default()),
            kernels: 0,
            launches_while_yielding,
            foreign_fails,
        }
    }

    fn args() -> BenchArgs {
        BenchArgs {
            gpu: None,
            config: None,
            targets: vec![50.0],
            seconds: 3.0,
            out: "unused".into(),
            no_yield: false,
            sim: true,
            force: false,
        }
    }

    fn bench(rig: &mut Scripted) -> anyhow::Result<BenchSummary> {
        let (args, config) = (args(), Settings::default());
        let targets = check_args(&args)?;
        let (rec, skipped) = measure(rig, &args, &targets, &config, &ProgressBar::hidden())?;
        Ok(summarize(rig, &args, &config, &rec, skipped))
    }

    #[test]
    fn a_launcher_quiet_while_yielding_passes_and_power_memory_reach_the_summary() {
        let summary = bench(&mut scripted(false, false)).unwrap();
        let y = summary.yield_test.as_ref().unwrap();
        assert_eq!(y.own_kernels_while_yielding, Some(0));
        assert!(y.passed());
        let t = &summary.targets[0];
        assert_eq!(
            (t.mean_power_w, t.own_memory_mib),
            (Some(100.0), Some(254.0))
        );
        assert_eq!(summary.idle_power_w, Some(60.0));
    }

    #[test]
    fn kernels_launched_while_yielding_fail_the_yield_test() {
        let summary = bench(&mut scripted(true, false)).unwrap();
        let y = summary.yield_test.unwrap();
        assert!(y.own_kernels_while_yielding.unwrap() > 0);
        assert!(!y.passed());
    }

    #[test]
    fn a_failed_foreign_process_is_reported() {
        let err = bench(&mut scripted(false, true)).unwrap_err();
        assert!(
            format!("{err:#}")
                .contains("the foreign process of the yield test failed: exit status: 1"),
            "{err:#}"
        );
    }

    #[test]
    fn targets_and_seconds_are_checked() {
        let mut a = args();
        a.targets = vec![50.0, 100.0];
        assert_eq!(check_args(&a).unwrap().len(), 2);
        for bad in [vec![], vec![0.0], vec![-5.0], vec![101.0], vec![f64::NAN]] {
            a.targets = bad;
            assert!(check_args(&a).is_err(), "{:?}", a.targets);
        }
        a.targets = vec![50.0];
        for bad in [0.0, 0.9, 3601.0, f64::INFINITY] {
            a.seconds = bad;
            assert!(check_args(&a).is_err(), "{bad}");
        }
    }
}
