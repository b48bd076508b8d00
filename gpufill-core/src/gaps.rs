//! Filling the gaps of live work without MPS, at a cost the user bounds
//! (`yield.beside_live = "fill_gaps"`): what our kernels charge a live job, estimated
//! from their own timing, and the rate control that holds that estimate under the bound
//! ([`GapCost`]).
//!
//! # The physics
//! Measured on H200s (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps):
//! without MPS the GPU runs one context at a time. A job's kernel that arrives while one
//! kernel of ours runs waits the rest of it and one context switch (136 us); one that
//! arrives while kernels of ours are queued back to back waits out a time slice (about
//! 2 ms), whatever their length. A job whose context was not the last one on the GPU
//! pays the switch even when ours is idle. So gpufill fills gaps with one short kernel
//! at a time ([`crate::LaunchShape::Gaps`]), an idle gap longer than the switch after
//! each (so the job gets in at the end of our kernel), and every time the job meets our
//! context it pays about a switch and half a kernel.
//!
//! # What our kernels see, and what it costs
//! A kernel of ours that finds the job's context on the GPU (it starts late, is held
//! back or cut short) is a **meeting**: the job ran, so our context met it on its way
//! in or out. The launcher then stays idle for the **hold** this module sets, so that
//! it does not keep meeting the same busy spell. Each meeting is charged a switch and
//! half a kernel; a kernel of ours held back behind the job's queued work got in only at
//! the end of the job's time slice, so it is charged two switches and a whole kernel
//! more ([`GapCost::charge`]).
//!
//! The estimate is what that charge is worth against the job's own busy time (NVML's
//! utilization less our kernels' share): the slowdown of the job's work while it runs,
//! which bounds both a service's mean request latency and a trainer's step rate from
//! above. It is conservative for a trainer that waits on its input (the charge is spread
//! over its wait too) and exact for requests that all meet our context.
//!
//! # Rate control
//! At every NVML sample the estimate is updated and the hold adjusted: over the bound it
//! grows by half (up to [`MAX_HOLD`]), under half the bound it shrinks (down to
//! [`MIN_HOLD`]). A longer hold fills fewer of the job's gaps, so fewer of its busy
//! spells meet our context: a service of sub-millisecond requests, each of which pays
//! about a third of its length for a meeting, is filled beside only rarely, while a
//! trainer whose steps are milliseconds long keeps most of its gaps filled.

use std::time::Duration;

use crate::time::Time;
use crate::units::Utilization;

/// One context switch between two contexts, as measured on H200s
/// (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps).
pub const CONTEXT_SWITCH: Duration = Duration::from_micros(136);

/// The shortest idle gap after each kernel of ours while filling gaps: longer than a
/// switch, so a job that is ready gets the GPU at the end of our kernel instead of our
/// next launch winning the race (it won most of them with 20 us gaps: the same section).
pub const MIN_GAP: Duration = Duration::from_micros(150);

/// The length of each kernel of ours while filling gaps: long enough that a job's
/// kernel which finds the GPU ready at its end gets in before our next launch (at 10-25
/// us kernels our next one won most races), short enough that a job's kernel arriving
/// during one waits little (half of it on average).
pub const GAP_KERNEL: Duration = Duration::from_micros(100);

/// The shortest hold after a meeting.
pub const MIN_HOLD: Duration = Duration::from_millis(5);

/// The longest hold after a meeting.
pub const MAX_HOLD: Duration = Duration::from_secs(10);

/// How much of the newest estimate each NVML sample takes in (the rest is the old one).
const SMOOTHING: f64 = 0.3;

/// The least job busy share the estimate divides by: below it NVML cannot tell a job's
/// work from nothing, and the estimate stays large rather than unbounded.
const MIN_BUSY: f64 = 0.01;

/// What a load source saw while filling gaps ([`crate::LaunchShape::Gaps`]) since it was
/// last asked ([`crate::LoadSource::gaps_seen`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GapReport {
    /// Kernels of ours that ran.
    pub kernels: u32,
    /// Kernels of ours that met another context (started late, held back, cut short or
    /// ran long); each one begins a hold.
    pub met: u32,
    /// Of those, kernels held back behind the other context's queued work: they got in
    /// at the end of its time slice.
    pub held_back: u32,
}

impl std::ops::Add for GapReport {
    type Output = GapReport;

    /// What two reports saw together.
    fn add(self, other: GapReport) -> GapReport {
        GapReport {
            kernels: self.kernels + other.kernels,
            met: self.met + other.met,
            held_back: self.held_back + other.held_back,
        }
    }
}

/// The cost estimate and the hold that keeps it under the bound (module docs).
#[derive(Clone, Debug)]
pub struct GapCost {
    /// Each of our kernels' length.
    kernel: Duration,
    /// Since the last sample: what our kernels saw, and since when.
    pending: GapReport,
    since: Option<Time>,
    /// The smoothed estimate, a ratio (0.02 is 2 %); `None` before the first sample.
    estimate: Option<f64>,
    /// The hold after a meeting.
    hold: Duration,
}

impl GapCost {
    /// A meter for kernels of `kernel`, starting with the shortest hold.
    pub fn new(kernel: Duration) -> Self {
        GapCost {
            kernel,
            pending: GapReport::default(),
            since: None,
            estimate: None,
            hold: MIN_HOLD,
        }
    }

    /// The estimated cost to the live work, a ratio; `None` before an estimate.
    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }

    /// The hold after a meeting in force.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// The job time that `report`'s meetings cost: a switch and half a kernel each, and
    /// two switches and a whole kernel more for each kernel of ours held back.
    pub fn charge(&self, report: GapReport) -> Duration {
        let meeting = CONTEXT_SWITCH + self.kernel / 2;
        let preemption = CONTEXT_SWITCH * 2 + self.kernel;
        meeting * report.met + preemption * report.held_back
    }

    /// Takes in what our kernels saw up to `now`, and, at a new NVML `sample`, updates
    /// the estimate and the hold against `max_cost` (a ratio). Returns the new hold when
    /// it changed.
    pub fn update(
        &mut self,
        now: Time,
        report: GapReport,
        sample: Option<Utilization>,
        max_cost: f64,
    ) -> Option<Duration> {
        let since = *self.since.get_or_insert(now);
        self.pending = self.pending + report;
        let sample = sample?;
        let elapsed = now.saturating_since(since).as_secs_f64();
        if elapsed <= 0.0 {
            return None;
        }
        let ours = (self.kernel * self.pending.kernels).as_secs_f64() / elapsed;
        let busy = (sample.fraction() - ours).max(MIN_BUSY);
        let cost = self.charge(self.pending).as_secs_f64() / elapsed / busy;
        let estimate = match self.estimate {
            Some(old) => old + SMOOTHING * (cost - old),
            None => cost,
        };
        self.estimate = Some(estimate);
        self.pending = GapReport::default();
        self.since = Some(now);
        let hold = if estimate > max_cost {
            self.hold.mul_f64(1.5).min(MAX_HOLD)
        } else if estimate < max_cost / 2.0 {
            self.hold.div_f64(1.2).max(MIN_HOLD)
        } else {
            self.hold
        };
        (hold != self.hold).then(|| {
            self.hold = hold;
            hold
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Duration = Duration::from_micros(100);

    fn pct(p: f64) -> Utilization {
        Utilization::saturating_from_fraction(p / 100.0)
    }

    /// Feeds `samples` NVML samples 200 ms apart, each after `report`, with the GPU at
    /// `util`.
    fn feed(cost: &mut GapCost, samples: u32, report: GapReport, util: f64) {
        let start = Time::ZERO + Duration::from_secs(1);
        cost.update(start, GapReport::default(), None, 0.02);
        for i in 1..=samples {
            let now = start + Duration::from_millis(200) * i;
            cost.update(now, report, Some(pct(util)), 0.02);
        }
    }

    #[test]
    fn a_meeting_costs_a_switch_and_half_a_kernel_and_a_held_back_kernel_more() {
        let cost = GapCost::new(K);
        let met = GapReport {
            kernels: 10,
            met: 1,
            held_back: 0,
        };
        assert_eq!(cost.charge(met), Duration::from_micros(186));
        let held = GapReport {
            held_back: 1,
            ..met
        };
        assert_eq!(cost.charge(held), Duration::from_micros(186 + 372));
    }

    #[test]
    fn a_trainer_met_once_a_step_costs_little_of_its_busy_time_and_keeps_the_shortest_hold() {
        // Steps of 12 ms busy and 25 ms waiting: 5.4 steps per 200 ms, each met once;
        // 12 ms of our kernels in each 25 ms wait; the GPU at 50 %.
        let mut cost = GapCost::new(K);
        let report = GapReport {
            kernels: 100,
            met: 5,
            held_back: 0,
        };
        feed(&mut cost, 20, report, 50.0);
        let estimate = cost.estimate().unwrap();
        // 5 x 186 us in 200 ms, against a busy share of 50 % - 5 % = 45 %: about 1 %.
        assert!((0.009..0.012).contains(&estimate), "{estimate}");
        assert_eq!(cost.hold(), MIN_HOLD);
    }

    #[test]
    fn sub_millisecond_requests_all_met_cost_a_third_and_the_hold_grows_to_its_longest() {
        // 20 requests a second of 0.65 ms, each met: 4 a sample; the GPU at 5 %.
        let mut cost = GapCost::new(K);
        let report = GapReport {
            kernels: 4,
            met: 4,
            held_back: 0,
        };
        feed(&mut cost, 3, report, 1.5);
        assert!(cost.estimate().unwrap() > 0.25, "{:?}", cost.estimate());
        feed(&mut cost, 100, report, 1.5);
        assert_eq!(cost.hold(), MAX_HOLD);
    }

    #[test]
    fn the_hold_shrinks_again_once_nothing_is_met() {
        let mut cost = GapCost::new(K);
        let met = GapReport {
            kernels: 4,
            met: 4,
            held_back: 1,
        };
        feed(&mut cost, 10, met, 10.0);
        let long = cost.hold();
        assert!(long > MIN_HOLD * 10, "{long:?}");
        let quiet = GapReport {
            kernels: 500,
            ..GapReport::default()
        };
        feed(&mut cost, 200, quiet, 50.0);
        assert!(cost.estimate().unwrap() < 0.001);
        assert_eq!(cost.hold(), MIN_HOLD);
    }

    #[test]
    fn nothing_changes_between_samples() {
        let mut cost = GapCost::new(K);
        let report = GapReport {
            kernels: 4,
            met: 4,
            held_back: 0,
        };
        assert_eq!(cost.update(Time::ZERO, report, None, 0.02), None);
        assert_eq!(cost.estimate(), None);
        assert_eq!(cost.hold(), MIN_HOLD);
    }
}
