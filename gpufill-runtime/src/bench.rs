//! `gpufill bench`'s measurement: one fill loop driven through a [`Rig`] (a real GPU,
//! [`RealRig`], with a foreign process the caller starts; or the simulated one,
//! [`SimRig`]), the ticks, power and memory it records, and the summary maths
//! ([`BenchSummary`]), the foreign process's load ([`foreign_load`]), and what the
//! files and the terminal show of them: the table ([`write_table`]), `bench.csv`
//! ([`write_csv`]) and `bench.svg` ([`svg`]); `bench.json` is the summary's serde form
//! (feature `serde`). The binary adds the flags, starts the foreign process (itself, as
//! `gpufill bench-foreign`), the progress bar, and writes the files.
//!
//! Phases, all on one time axis:
//! 1. each target for its seconds, one after the other without stopping;
//! 2. the yield test at the last target: 2 s of filling, then a foreign process runs
//!    for 3 s; the bench times its appearance in NVML's list, gpufill's yield, its exit
//!    and gpufill filling again; then 2 s of filling.

use std::time::Duration;

use gpufill_core::{Tick, Utilization};

use crate::{Settings, State, Time};

mod foreign;
mod real;
mod sim;
mod summary;
pub mod svg;
mod table;

pub use foreign::{ForeignError, foreign_load};
pub use real::{RealRig, RealRigError, SpawnForeign};
pub use sim::SimRig;
pub use summary::{
    BenchSummary, SETTLE_POINTS, TargetSummary, YieldObservation, YieldSummary, summarize_target,
    summarize_yield,
};
pub use table::{write_csv, write_table};

/// How long the foreign process of the yield test runs.
const FOREIGN_RUN: Duration = Duration::from_secs(3);
/// Filling before the foreign process starts, and after gpufill fills again.
const YIELD_MARGIN: Duration = Duration::from_secs(2);
/// Power is read this often (NVML's board power is itself an average).
const POWER_EVERY: Duration = Duration::from_millis(100);
/// Own memory is read this often.
const MEMORY_EVERY: Duration = Duration::from_secs(1);

/// Why a rig could not step or start its foreign process.
pub type RigError = Box<dyn std::error::Error + Send + Sync>;

/// Why a measurement ended early.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The loop stopped: the GPU failed (the log says how).
    #[error("stopped filling at {at_s:.2} s: the GPU failed (see the log above)")]
    Stopped {
        /// Seconds into the measurement.
        at_s: f64,
    },
    /// The yield test's foreign process failed.
    #[error("the foreign process of the yield test failed: {0}")]
    Foreign(String),
    /// The rig failed.
    #[error(transparent)]
    Rig(RigError),
}

/// What the bench sees of the foreign process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForeignSeen {
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
pub trait Rig {
    /// The GPU, for the table.
    fn name(&self) -> String;
    /// The rig's time now.
    fn now(&self) -> Time;
    /// Steps the fill loop once at `target`.
    ///
    /// # Errors
    /// The loop could not step.
    fn step(&mut self, target: Utilization) -> Result<Tick, RigError>;
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
    ///
    /// # Errors
    /// It could not be started.
    fn start_foreign(&mut self, run: Duration) -> Result<(), RigError>;
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

/// What to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Targets to hold one after the other.
    pub targets: Vec<Utilization>,
    /// Seconds per target.
    pub seconds_per_target: f64,
    /// Why the yield test is skipped, if it is (else the rig may still refuse it).
    pub skip_yield: Option<String>,
}

/// How far a measurement is, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    /// Holding this target.
    Target(Utilization),
    /// The yield test.
    YieldTest,
    /// Milliseconds since the start.
    ElapsedMs(u64),
}

/// The expected length of the yield test.
pub fn yield_test_length(settings: &Settings) -> Duration {
    YIELD_MARGIN * 2 + FOREIGN_RUN + settings.yield_settings(false).grace
}

/// Everything recorded.
#[derive(Debug, Default)]
pub struct Recording {
    /// When the measurement started.
    pub start: Time,
    /// Every tick.
    pub ticks: Vec<Tick>,
    /// Board power readings: (time, W).
    pub power: Vec<(Time, f64)>,
    /// Per target: (target, from, to, largest own memory in MiB).
    pub windows: Vec<(Utilization, Time, Time, Option<f64>)>,
    /// The yield test: its target, what was seen, and the span to shade.
    pub yield_test: Option<(Utilization, YieldObservation, Time, Time)>,
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
    ) -> Result<Tick, BenchError> {
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
        let tick = rig.step(target).map_err(BenchError::Rig)?;
        if tick.state == State::Stopped {
            return Err(BenchError::Stopped {
                at_s: tick.at.saturating_since(self.start).as_secs_f64(),
            });
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
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Option<f64>, BenchError> {
        let end = rig.now() + length;
        let mut memory = None;
        while rig.now() < end {
            self.step(rig, target, &mut memory)?;
            rig.wait();
            progress(Progress::ElapsedMs(self.elapsed_ms(rig)));
        }
        Ok(memory)
    }

    fn elapsed_ms(&self, rig: &dyn Rig) -> u64 {
        u64::try_from(rig.now().saturating_since(self.start).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Measures `plan` on `rig` with the loop of `settings`: the recording, and why the
/// yield test was skipped, if it was.
///
/// # Errors
/// The loop stopped, the rig failed, or the foreign process failed.
pub fn measure(
    rig: &mut dyn Rig,
    plan: &Plan,
    settings: &Settings,
    progress: &mut dyn FnMut(Progress),
) -> Result<(Recording, Option<String>), BenchError> {
    let mut rec = Recording {
        start: rig.now(),
        ..Recording::default()
    };
    let per_target = Duration::from_secs_f64(plan.seconds_per_target);
    for &target in &plan.targets {
        progress(Progress::Target(target));
        let from = rig.now();
        let memory = rec.hold(rig, target, per_target, progress)?;
        rec.windows.push((target, from, rig.now(), memory));
    }
    let skipped = plan.skip_yield.clone().or_else(|| rig.yield_unsupported());
    if skipped.is_none() {
        progress(Progress::YieldTest);
        let target = *plan
            .targets
            .last()
            .unwrap_or(&settings.fill_settings().target);
        yield_test(rig, &mut rec, target, settings, progress)?;
    }
    Ok((rec, skipped))
}

fn yield_test(
    rig: &mut dyn Rig,
    rec: &mut Recording,
    target: Utilization,
    settings: &Settings,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), BenchError> {
    rec.hold(rig, target, YIELD_MARGIN, progress)?;
    let grace = settings.yield_settings(false).grace;
    let spawned = rig.now();
    rig.start_foreign(FOREIGN_RUN).map_err(BenchError::Rig)?;
    let deadline = spawned + FOREIGN_RUN + grace + Duration::from_secs(10);
    let mut obs = YieldObservation {
        spawned,
        grace,
        ..YieldObservation::default()
    };
    let (mut at_quiesce, mut at_gone, mut yielded, mut memory) = (None, None, false, None);
    loop {
        let tick = rec.step(rig, target, &mut memory)?;
        progress(Progress::ElapsedMs(rec.elapsed_ms(rig)));
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
            return Err(BenchError::Foreign(why));
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
    rec.hold(rig, target, YIELD_MARGIN, progress)?;
    rec.yield_test = Some((target, obs, shade_from, shade_to));
    Ok(())
}

#[cfg(test)]
mod tests;
