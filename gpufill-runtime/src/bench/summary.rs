//! The summary maths of `gpufill bench`: per target, how well the loop held it and
//! what it cost; for the yield test, how fast gpufill stood aside and came back.
//! Pure functions over the recorded ticks, so they are tested without a GPU.

use std::time::Duration;

use gpufill_core::{Event, Tick, Utilization};
use gpufill_sim::tracking;

use super::{Plan, Recording, Rig};
use crate::{Settings, State, Time};

/// Tolerance for "settled", in percentage points (as `scripts/gpulab/track.py`, `lab.py
/// track`, and docs/benchmarks.md#how-to-reproduce define it).
pub const SETTLE_POINTS: f64 = 2.0;

/// How one target went.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TargetSummary {
    /// The target, percent.
    pub target_percent: f64,
    /// From the start of this target to the first sample from which every later one
    /// stays within 2 points; `None` if it never settled, or if gpufill paused or
    /// yielded in the window (nobody else is on the GPU during a bench: a pause there
    /// misjudged the host, and what it took to settle again is no settle time).
    pub settle_s: Option<f64>,
    /// How often gpufill paused or yielded in the window.
    pub pauses: usize,
    /// Mean absolute error of the samples after settling, points.
    pub mean_abs_error_points: Option<f64>,
    /// Mean measured utilization after settling (all samples when it never settled).
    pub mean_util_percent: Option<f64>,
    /// Samples after settling.
    pub samples: usize,
    /// The most GPU memory NVML listed for our process, MiB.
    pub own_memory_mib: Option<f64>,
    /// Mean board power after settling (over the whole window when it never settled), W.
    pub mean_power_w: Option<f64>,
}

/// Judges the ticks of `[from, to)` against `target`. `power` holds (time, watts)
/// readings, `memory_mib` the largest own-memory reading of the window.
pub fn summarize_target(
    ticks: &[Tick],
    from: Time,
    to: Time,
    target: Utilization,
    power: &[(Time, f64)],
    memory_mib: Option<f64>,
) -> TargetSummary {
    let t = tracking(ticks, from, to, target, SETTLE_POINTS);
    let pauses = ticks
        .iter()
        .filter(|t| t.at >= from && t.at < to)
        .flat_map(|t| &t.events)
        .filter(|e| matches!(e, Event::Paused { .. } | Event::Yielded { .. }))
        .count();
    let steady_from = t.settle.map_or(from, |s| from + s);
    let samples: Vec<f64> = ticks
        .iter()
        .filter(|t| t.at >= steady_from && t.at < to)
        .filter_map(|t| t.sample.map(|s| s.percent()))
        .collect();
    let watts: Vec<f64> = power
        .iter()
        .filter(|(at, _)| *at >= steady_from && *at < to)
        .map(|(_, w)| *w)
        .collect();
    TargetSummary {
        target_percent: target.percent(),
        settle_s: t.settle.filter(|_| pauses == 0).map(|d| d.as_secs_f64()),
        pauses,
        mean_abs_error_points: Some(t.mean_abs_error).filter(|e| e.is_finite()),
        mean_util_percent: mean(&samples),
        samples: t.samples,
        own_memory_mib: memory_mib,
        mean_power_w: mean(&watts),
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// What the bench saw of the foreign process during the yield test.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct YieldObservation {
    /// When it was started.
    pub spawned: Time,
    /// When it first appeared in NVML's process list.
    pub listed: Option<Time>,
    /// When it had left NVML's process list again.
    pub unlisted: Option<Time>,
    /// When it exited.
    pub exited: Option<Time>,
    /// When our launcher had no kernel queued or running, after the loop yielded.
    pub quiesced: Option<Time>,
    /// Our kernels launched before the yielding tick and when the foreign process
    /// left the list (real GPU only: the launcher's counter).
    pub kernels: Option<(u64, u64)>,
    /// Time our kernels ran beside the foreign one's (simulated GPU only).
    pub overlap: Option<Duration>,
    /// The configured grace.
    pub grace: Duration,
}

/// The yield test's result.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct YieldSummary {
    /// The target held before the foreign process came, percent.
    pub target_percent: f64,
    /// From starting the foreign process to its appearance in NVML's list, s.
    pub listed_after_start_s: Option<f64>,
    /// From its appearance to gpufill's state turning `yielding`, ms.
    pub yielding_after_ms: Option<f64>,
    /// From its appearance to our launcher holding no queued or running kernel, ms.
    pub launcher_idle_after_ms: Option<f64>,
    /// Our kernels launched after the loop yielded, while it was still listed (must be 0).
    pub own_kernels_while_yielding: Option<u64>,
    /// Time our kernels ran beside its kernels (simulated GPU only), ms.
    pub overlap_ms: Option<f64>,
    /// From its exit to gpufill filling again, s (the grace, plus up to a tick).
    pub filling_again_after_exit_s: Option<f64>,
    /// The grace configured, s.
    pub grace_s: f64,
}

impl YieldSummary {
    /// Whether gpufill yielded, stayed idle and came back.
    pub fn passed(&self) -> bool {
        self.yielding_after_ms.is_some()
            && self.own_kernels_while_yielding.unwrap_or(0) == 0
            && self.filling_again_after_exit_s.is_some()
    }
}

/// Judges the yield test from the ticks and what was seen of the foreign process.
pub fn summarize_yield(
    ticks: &[Tick],
    target: Utilization,
    obs: &YieldObservation,
) -> YieldSummary {
    let yielded = ticks
        .iter()
        .find(|t| t.at >= obs.spawned && t.state == State::Yielding)
        .map(|t| t.at);
    // The loop polls NVML too: if it saw the newcomer before the watcher did, that
    // is the earlier (truer) appearance.
    let appeared = match (obs.listed, yielded) {
        (Some(l), Some(y)) => Some(l.min(y)),
        (l, _) => l,
    };
    let ms_from = |at: Option<Time>| {
        appeared
            .zip(at)
            .map(|(a, b)| b.saturating_since(a).as_secs_f64() * 1e3)
    };
    let gone = obs.exited.or(obs.unlisted);
    let back = gone.and_then(|g| {
        ticks
            .iter()
            .find(|t| t.at >= g && t.state == State::Filling)
            .map(|t| t.at.saturating_since(g).as_secs_f64())
    });
    YieldSummary {
        target_percent: target.percent(),
        listed_after_start_s: appeared.map(|a| a.saturating_since(obs.spawned).as_secs_f64()),
        yielding_after_ms: ms_from(yielded),
        launcher_idle_after_ms: ms_from(obs.quiesced),
        own_kernels_while_yielding: obs.kernels.map(|(at_yield, at_gone)| at_gone - at_yield),
        overlap_ms: obs.overlap.map(|d| d.as_secs_f64() * 1e3),
        filling_again_after_exit_s: back,
        grace_s: obs.grace.as_secs_f64(),
    }
}

/// Everything `bench.json` holds (its serde form, feature `serde`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BenchSummary {
    /// The GPU, e.g. `NVIDIA H200 (GPU 0)`, or `simulated GPU`.
    pub gpu: String,
    /// Whether it ran on the simulated GPU.
    pub simulated: bool,
    /// Seconds per target.
    pub seconds_per_target: f64,
    /// The loop tick, ms.
    pub tick_ms: u64,
    /// Mean board power before gpufill opened its context, W.
    pub idle_power_w: Option<f64>,
    /// Per target, in order.
    pub targets: Vec<TargetSummary>,
    /// The yield test, unless skipped.
    pub yield_test: Option<YieldSummary>,
    /// Why the yield test was skipped, if it was.
    pub yield_skipped: Option<String>,
}

impl BenchSummary {
    /// The summary of `rec`, measured by [`super::measure`] on `rig` after `plan`
    /// with the loop of `settings`; `yield_skipped` as `measure` returned it.
    pub fn new(
        rig: &dyn Rig,
        plan: &Plan,
        simulated: bool,
        settings: &Settings,
        rec: &Recording,
        yield_skipped: Option<String>,
    ) -> BenchSummary {
        BenchSummary {
            gpu: rig.name(),
            simulated,
            seconds_per_target: plan.seconds_per_target,
            tick_ms: settings.tick_ms,
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

    /// How often gpufill paused or yielded in the targets' windows, where nobody else
    /// was on the GPU.
    pub fn pauses(&self) -> usize {
        self.targets.iter().map(|t| t.pauses).sum()
    }

    /// Whether the idle power is above some target's filling power: then it was read
    /// while the GPU was still clocked up from earlier work (seen after other
    /// benchmarks:
    /// docs/benchmarks-history.md#results-on-the-h200-session-of-2026-11-21-driver-58015904).
    pub fn idle_power_suspect(&self) -> bool {
        self.idle_power_w.is_some_and(|idle| {
            self.targets
                .iter()
                .filter_map(|t| t.mean_power_w)
                .any(|p| p < idle)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::{Duty, Width};

    fn pct(p: f64) -> Utilization {
        Utilization::saturating_from_fraction(p / 100.0)
    }

    fn tick(ms: u64, state: State, sample: Option<f64>) -> Tick {
        Tick {
            at: Time::from_millis(ms),
            state,
            target: pct(50.0),
            sample: sample.map(pct),
            util: sample.map(pct),
            duty: Duty::ZERO,
            width: Width::ONE_WARP,
            shape: gpufill_core::LaunchShape::Bursts,
            foreign: 0,
            probed: None,
            cost: None,
            events: Vec::new(),
        }
    }

    /// Samples every 200 ms from `from_ms`: the values given, in order.
    fn samples(from_ms: u64, values: &[f64]) -> Vec<Tick> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| tick(from_ms + 200 * i as u64, State::Filling, Some(*v)))
            .collect()
    }

    #[test]
    fn a_target_is_judged_from_its_own_window_after_settling() {
        // Before the window: far off (must be ignored). In it: off, then settled.
        let mut ticks = samples(0, &[90.0, 90.0]);
        ticks.extend(samples(1000, &[70.0, 55.0, 49.0, 51.0, 50.0, 52.0]));
        let power = [
            (Time::from_millis(1000), 300.0),
            (Time::from_millis(1500), 120.0),
            (Time::from_millis(2000), 130.0),
        ];
        let s = summarize_target(
            &ticks,
            Time::from_millis(1000),
            Time::from_millis(2200),
            pct(50.0),
            &power,
            Some(254.0),
        );
        assert_eq!(s.settle_s, Some(0.4));
        assert_eq!(s.samples, 4);
        assert!((s.mean_abs_error_points.unwrap() - 1.0).abs() < 1e-9);
        assert!((s.mean_util_percent.unwrap() - 50.5).abs() < 1e-9);
        assert_eq!(s.mean_power_w, Some(125.0));
        assert_eq!(s.own_memory_mib, Some(254.0));
    }

    #[test]
    fn a_target_never_reached_has_no_settle_time_and_means_over_the_window() {
        let ticks = samples(0, &[30.0, 20.0, 30.0, 20.0]);
        let power = [
            (Time::from_millis(100), 100.0),
            (Time::from_millis(300), 200.0),
        ];
        let s = summarize_target(
            &ticks,
            Time::ZERO,
            Time::from_millis(1000),
            pct(50.0),
            &power,
            None,
        );
        assert_eq!(s.settle_s, None);
        assert_eq!(s.mean_abs_error_points, None);
        assert_eq!(s.samples, 0);
        assert_eq!(s.mean_util_percent, Some(25.0));
        assert_eq!(s.mean_power_w, Some(150.0));
    }

    #[test]
    fn a_window_without_samples_reports_nothing_rather_than_nan() {
        let s = summarize_target(
            &[],
            Time::ZERO,
            Time::from_millis(1000),
            pct(10.0),
            &[],
            None,
        );
        assert_eq!(s.mean_util_percent, None);
        assert_eq!(s.mean_power_w, None);
        assert_eq!(s.mean_abs_error_points, None);
    }

    fn yield_ticks() -> Vec<Tick> {
        // Filling until 1.02 s, yielding from 1.03 s to 7.0 s, filling again after.
        (0..900)
            .map(|i| {
                let ms = 10 * i;
                let state = if (1030..7000).contains(&ms) {
                    State::Yielding
                } else {
                    State::Filling
                };
                tick(ms, state, None)
            })
            .collect()
    }

    #[test]
    fn yield_latencies_are_measured_from_the_listing() {
        let obs = YieldObservation {
            spawned: Time::from_millis(800),
            listed: Some(Time::from_millis(1024)),
            unlisted: Some(Time::from_millis(2000)),
            exited: Some(Time::from_millis(1990)),
            quiesced: Some(Time::from_millis(1040)),
            kernels: Some((500, 500)),
            overlap: None,
            grace: Duration::from_secs(5),
        };
        let y = summarize_yield(&yield_ticks(), pct(50.0), &obs);
        assert!((y.listed_after_start_s.unwrap() - 0.224).abs() < 1e-9);
        assert!((y.yielding_after_ms.unwrap() - 6.0).abs() < 1e-9);
        assert!((y.launcher_idle_after_ms.unwrap() - 16.0).abs() < 1e-9);
        assert_eq!(y.own_kernels_while_yielding, Some(0));
        assert!((y.filling_again_after_exit_s.unwrap() - 5.01).abs() < 1e-9);
        assert!(y.passed());
    }

    #[test]
    fn a_yield_seen_by_the_loop_before_the_watcher_counts_from_the_loop() {
        let obs = YieldObservation {
            spawned: Time::from_millis(800),
            listed: Some(Time::from_millis(1035)),
            exited: Some(Time::from_millis(2000)),
            ..YieldObservation::default()
        };
        let y = summarize_yield(&yield_ticks(), pct(50.0), &obs);
        assert_eq!(y.yielding_after_ms, Some(0.0));
        assert!((y.listed_after_start_s.unwrap() - 0.23).abs() < 1e-9);
    }

    #[test]
    fn kernels_launched_while_yielding_or_no_yield_fail_the_test() {
        let mut obs = YieldObservation {
            spawned: Time::from_millis(800),
            listed: Some(Time::from_millis(1024)),
            exited: Some(Time::from_millis(1990)),
            kernels: Some((500, 503)),
            ..YieldObservation::default()
        };
        let y = summarize_yield(&yield_ticks(), pct(50.0), &obs);
        assert_eq!(y.own_kernels_while_yielding, Some(3));
        assert!(!y.passed());
        obs.kernels = None;
        let never: Vec<Tick> = (0..900)
            .map(|i| tick(10 * i, State::Filling, None))
            .collect();
        let y = summarize_yield(&never, pct(50.0), &obs);
        assert_eq!(y.yielding_after_ms, None);
        assert!(!y.passed());
    }

    fn summary(idle_power_w: Option<f64>, targets: Vec<TargetSummary>) -> BenchSummary {
        BenchSummary {
            gpu: "GPU".into(),
            simulated: false,
            seconds_per_target: 5.0,
            tick_ms: 10,
            idle_power_w,
            targets,
            yield_test: None,
            yield_skipped: None,
        }
    }

    #[test]
    fn an_idle_power_above_the_filling_power_is_suspect() {
        let at = |watts| {
            summarize_target(
                &samples(0, &[50.0, 50.0]),
                Time::ZERO,
                Time::from_millis(1000),
                pct(50.0),
                &[(Time::ZERO, watts)],
                None,
            )
        };
        assert!(summary(Some(127.0), vec![at(123.0)]).idle_power_suspect());
        assert!(!summary(Some(80.0), vec![at(120.0)]).idle_power_suspect());
        assert!(!summary(None, vec![at(120.0)]).idle_power_suspect());
    }

    #[test]
    fn a_target_in_which_gpufill_paused_has_no_settle_time() {
        // Settled at 0.4 s, then a pause with nobody there (a misjudged host) and back.
        let mut ticks = samples(0, &[20.0, 40.0, 50.0, 50.0, 0.0, 0.0, 50.0, 50.0, 50.0]);
        ticks[4].events.push(Event::Paused {
            pids: Vec::new(),
            unlisted: true,
            sign: None,
        });
        let t = summarize_target(
            &ticks,
            Time::ZERO,
            Time::from_millis(1800),
            pct(50.0),
            &[],
            None,
        );
        assert_eq!((t.settle_s, t.pauses), (None, 1));
        let clean = summarize_target(
            &samples(0, &[20.0, 40.0, 50.0, 50.0, 50.0]),
            Time::ZERO,
            Time::from_millis(1000),
            pct(50.0),
            &[],
            None,
        );
        assert_eq!((clean.settle_s, clean.pauses), (Some(0.4), 0));
        assert_eq!(summary(None, vec![t, clean]).pauses(), 1);
    }
}
