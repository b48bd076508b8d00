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
//! grows by half (up to [`MAX_HOLD`]), under 0.8 of the bound it shrinks (down to
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

/// Under this share of the bound the hold shrinks; over the bound it grows: the rate
/// control holds the estimate near the bound, not anywhere under it.
const SHRINK_BELOW: f64 = 0.8;

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
    /// Whether the estimate is over the bound: since it went over it, until it came
    /// back under [`SHRINK_BELOW`] of it (the hold's own thresholds).
    over: bool,
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
            over: false,
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

    /// Whether the estimate is over the bound: from when it went over to when it came
    /// back under 0.8 of it, the thresholds at which the hold grows and shrinks.
    pub fn over(&self) -> bool {
        self.over
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
            self.over = true;
            self.hold.mul_f64(1.5).min(MAX_HOLD)
        } else if estimate < max_cost * SHRINK_BELOW {
            self.over = false;
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

/// How a kernel of ours ended, as the gap filler judges it ([`GapPacer::kernel_done`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOutcome {
    /// It ran as asked: nobody ran since our previous kernel.
    Clear,
    /// It started a context switch late, and then ran: someone ran since our previous
    /// kernel and has gone (the job's spell of work came and went while we were idle or
    /// in our gap). A meeting that costs nothing more now.
    AfterOthers,
    /// It waited behind another context's work, or that work cut it short or came
    /// between: the job is busy now.
    Busy,
}

/// How much of a new sample the learned spell and period take in.
const LEARN: f64 = 0.25;

/// Periods learned before the pacer predicts the job's next spell.
const PREDICT_AFTER: u32 = 3;

/// Before a predicted spell, no launch this long ahead of it (and a twentieth of the
/// period more): the job's steps jitter, and a kernel of ours still queued when the job's
/// work arrives gets in only in the middle of it (two switches and a kernel).
const GUARD: Duration = Duration::from_micros(600);

/// A launch this much later than the end of the spell as learned was put off by the
/// cost bound's hold, not by the spell (the gap and a wake-up are well under it).
const CENSOR_SLACK: Duration = Duration::from_millis(1);

/// After a predicted spell's end, this much more before the next launch.
const AFTER_SPELL: Duration = Duration::from_micros(300);

/// When the gap filler launches its next kernel: it learns from what its kernels met how
/// long the job's spells of work last and how often they come, so that it launches only
/// in the job's gaps. Pure: the launcher (the CUDA pacing thread, the simulated GPU)
/// tells it each kernel's end and outcome and asks when it may launch the next.
///
/// - A kernel that found the job **busy** anchors a spell at its launch: the pacer holds
///   off for what is left of the spell as learned so far (at least the hold that keeps the
///   cost under the bound, [`GapCost`], which the caller passes to
///   [`GapPacer::next_launch`]); the time since the last spell's anchor is a sample of the
///   job's period.
/// - The first kernel **after** the spell (a switch late, or clear) ends it: its length is
///   a sample of the spell.
/// - Once the period is known (`PREDICT_AFTER` samples) the pacer launches nothing from
///   a guard before the next predicted spell until its predicted end: the job's work then
///   meets our context idle and pays one switch, not a kernel of ours queued into its
///   work. A prediction that is wrong shows as a busy kernel, which anchors it again.
#[derive(Clone, Debug, Default)]
pub struct GapPacer {
    /// The last busy kernel's end, and what was left of its spell then as learned.
    busy: Option<(Time, Duration)>,
    /// The spell in progress: its anchor.
    spell: Option<Time>,
    /// The last spell's anchor.
    last_anchor: Option<Time>,
    /// Learned: a spell's length, the period between spells, and how many periods.
    spell_len: Option<Duration>,
    period: Option<Duration>,
    periods: u32,
}

impl GapPacer {
    /// A pacer that knows nothing of the job yet.
    pub fn new() -> Self {
        GapPacer::default()
    }

    /// The learned spell length and period, when known.
    pub fn learned(&self) -> (Option<Duration>, Option<Duration>) {
        (self.spell_len, self.period)
    }

    /// A kernel of ours launched at `launched` ended at `ended` with `outcome`.
    pub fn kernel_done(&mut self, launched: Time, ended: Time, outcome: KernelOutcome) {
        match outcome {
            KernelOutcome::Busy => {
                // After a hold longer than the shortest, a busy kernel may be in another
                // spell: what the last one showed ends that one (at least until its busy
                // kernel's end), and this one begins anew; taken as one spell, the
                // spells of several steps would be learned as one.
                if let (Some(anchor), Some((last_busy, _))) = (self.spell, self.busy)
                    && launched > last_busy + MIN_HOLD + CENSOR_SLACK
                {
                    let least = last_busy.saturating_since(anchor);
                    self.spell_len = Some(self.spell_len.map_or(least, |l| l.max(least)));
                    self.spell = None;
                }
                if self.spell.is_none() {
                    // A new spell: it began before our kernel could start.
                    if let Some(last) = self.last_anchor {
                        self.learn_period(launched.saturating_since(last));
                    }
                    self.spell = Some(launched);
                    self.last_anchor = Some(launched);
                }
                let anchor = self.spell.unwrap_or(launched);
                let left = self.spell_len.map_or(Duration::ZERO, |len| {
                    len.saturating_sub(ended.saturating_since(anchor))
                });
                self.busy = Some((ended, left));
            }
            KernelOutcome::AfterOthers | KernelOutcome::Clear => {
                if let Some(anchor) = self.spell.take() {
                    // The spell was over by this launch. One that came within the
                    // shortest hold of the last busy kernel's end is a sample of its
                    // length; one the cost bound's longer hold put off says only that it
                    // lasted at least until that kernel's end (learned as a sample, it
                    // would only ever grow the spell).
                    match self.busy {
                        Some((ended, left))
                            if launched > ended + left.max(MIN_HOLD) + CENSOR_SLACK =>
                        {
                            let least = ended.saturating_since(anchor);
                            self.spell_len = Some(self.spell_len.map_or(least, |l| l.max(least)));
                        }
                        _ => {
                            let len = launched.saturating_since(anchor);
                            self.spell_len = Some(ewma(self.spell_len, len));
                        }
                    }
                }
            }
        }
    }

    /// Takes in the time between two spells' anchors. Holds and predictions skip spells,
    /// so samples span whole numbers of periods: the period is their common divisor
    /// ([`common_period`]), no shorter than a spell and a guard on either side. A sample
    /// that shares none with the period known is a new job's: start over from it.
    fn learn_period(&mut self, sample: Duration) {
        let shortest = self.spell_len.unwrap_or_default() + GUARD * 2;
        let common = self
            .period
            .and_then(|known| common_period(known, sample, shortest).map(|p| (known, p)));
        match common {
            // The same period: learn the sample as the periods it spans.
            Some((known, p)) if p >= known.mul_f64(0.9) => {
                let k = (sample.as_secs_f64() / known.as_secs_f64())
                    .round()
                    .max(1.0);
                self.period = Some(ewma(Some(known), sample.div_f64(k)));
                self.periods = self.periods.saturating_add(1);
            }
            // The period known spanned several: the common one is it.
            Some((_, p)) => {
                self.period = Some(p);
                self.periods = 2;
            }
            None => {
                self.period = Some(sample);
                self.periods = 1;
            }
        }
    }

    /// When the next kernel of length `kernel` may be launched, `earliest` being when the
    /// duty's gap ends, with at least `min_hold` after a busy kernel.
    pub fn next_launch(&self, earliest: Time, kernel: Duration, min_hold: Duration) -> Time {
        let mut at = earliest;
        if let Some((ended, left)) = self.busy {
            at = at.max(ended + left.max(min_hold));
        }
        let (Some(anchor), Some(period), Some(len)) =
            (self.last_anchor, self.period, self.spell_len)
        else {
            return at;
        };
        if self.periods < PREDICT_AFTER || self.spell.is_some() || period <= len + GUARD * 2 {
            return at;
        }
        // The predicted spell that our next kernel would meet: the first whose end is
        // still ahead.
        let guard = GUARD + period / 20;
        let since = at.saturating_since(anchor);
        let n = (since.as_secs_f64() / period.as_secs_f64()).floor();
        let mut start = anchor + period.mul_f64(n);
        if start + len + AFTER_SPELL <= at {
            start += period;
        }
        let end = start + len + AFTER_SPELL;
        if at + kernel + guard > start && at < end {
            end
        } else {
            at
        }
    }
}

/// The longest period that `a` and `b` are both near whole multiples of (within a tenth
/// of it), if it is at least `shortest`: Euclid's algorithm, with remainders within the
/// tolerance taken as none.
fn common_period(a: Duration, b: Duration, shortest: Duration) -> Option<Duration> {
    let (mut a, mut b) = (a.max(b).as_secs_f64(), a.min(b).as_secs_f64());
    let shortest = shortest.as_secs_f64().max(1e-4);
    while b >= shortest {
        let r = (a - (a / b).round() * b).abs();
        if r <= 0.1 * b {
            return Some(Duration::from_secs_f64(b));
        }
        (a, b) = (b, r);
    }
    None
}

fn ewma(old: Option<Duration>, sample: Duration) -> Duration {
    match old {
        Some(old) => old.mul_f64(1.0 - LEARN) + sample.mul_f64(LEARN),
        None => sample,
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

    const MS: Duration = Duration::from_millis(1);

    fn t(ms: f64) -> Time {
        Time::from_secs_f64(ms / 1e3)
    }

    /// A trainer of 10 ms spells every 35 ms met by a pacer that launches a 100 us kernel
    /// whenever it may (a gap of 150 us after each): returns the pacer and the kernels
    /// that met a busy job, per spell, over the last `last` spells of `spells`.
    fn trainer(spells: u32, last: u32) -> (GapPacer, Vec<u32>) {
        let mut pacer = GapPacer::new();
        let kernel = Duration::from_micros(100);
        let gap = Duration::from_micros(150);
        let ms = |at: Time| at.since_epoch().as_secs_f64() * 1e3;
        let busy = |at: Time| ms(at) % 35.0 < 10.0;
        // Whether the job worked at some time in [from, to).
        let worked = |from: Time, to: Time| {
            busy(from) || (ms(from) / 35.0).floor() < (ms(to) / 35.0).floor()
        };
        let end = t(35.0 * f64::from(spells));
        let mut now = Time::ZERO + MS * 12;
        let mut met = vec![0; spells as usize];
        loop {
            let at = pacer.next_launch(now, kernel, MIN_HOLD);
            if at >= end {
                break;
            }
            let spell = (ms(at) / 35.0) as usize;
            let (outcome, ended) = if busy(at) {
                met[spell] += 1;
                // Queued into the job's work, it gets in at the spell's end here.
                let spell_end = t(35.0 * spell as f64 + 10.0);
                (KernelOutcome::Busy, spell_end + kernel)
            } else if worked(now, at) {
                (KernelOutcome::AfterOthers, at + kernel)
            } else {
                (KernelOutcome::Clear, at + kernel)
            };
            pacer.kernel_done(at, ended, outcome);
            now = ended + gap;
        }
        let n = met.len();
        (pacer, met[n - last as usize..].to_vec())
    }

    #[test]
    fn the_pacer_learns_a_trainers_spell_and_period_and_stops_meeting_it_busy() {
        let (pacer, last) = trainer(40, 20);
        let (len, period) = pacer.learned();
        let period = period.unwrap();
        assert!(
            (34.0..36.0).contains(&(period.as_secs_f64() * 1e3)),
            "{period:?}"
        );
        assert!(len.is_some());
        // Once the period is known, no kernel of ours is queued into the job's work.
        assert!(last.iter().all(|&m| m == 0), "{last:?}");
    }

    #[test]
    fn a_launch_the_cost_bounds_hold_put_off_does_not_lengthen_the_learned_spell() {
        let mut pacer = GapPacer::new();
        // A 10 ms spell met at 0 ms; at the shortest hold our kernels meet it twice, and
        // the first launch after it (14 ms) is a sample of its length.
        pacer.kernel_done(t(0.0), t(2.0), KernelOutcome::Busy);
        let at = pacer.next_launch(t(2.2), MS, MIN_HOLD);
        assert_eq!(at, t(7.0));
        pacer.kernel_done(at, t(9.0), KernelOutcome::Busy);
        let at = pacer.next_launch(t(9.2), MS, MIN_HOLD);
        pacer.kernel_done(at, at + MS / 10, KernelOutcome::AfterOthers);
        assert_eq!(pacer.learned().0, Some(MS * 14));
        // Spells held off for 300 ms by the bound: each launch after one comes 300 ms
        // late, and the spell learned stays as it was.
        for i in 1..=20 {
            let start = 400.0 * f64::from(i);
            pacer.kernel_done(t(start), t(start + 9.0), KernelOutcome::Busy);
            let at = pacer.next_launch(t(start + 9.2), MS, MS * 300);
            assert_eq!(at, t(start + 309.0));
            pacer.kernel_done(at, at + MS, KernelOutcome::AfterOthers);
        }
        assert_eq!(pacer.learned().0, Some(MS * 14));
        // Busy kernels of several steps, 300 ms apart (each after a long hold), are
        // several spells, not one long one.
        for i in 30..40 {
            let start = 400.0 * f64::from(i);
            pacer.kernel_done(t(start), t(start + 9.0), KernelOutcome::Busy);
        }
        assert_eq!(pacer.learned().0, Some(MS * 14));
    }

    #[test]
    fn a_period_sample_spanning_skipped_spells_counts_as_that_many_periods() {
        let mut pacer = GapPacer::new();
        // Spells every 37 ms, met at the 1st, 2nd, 5th, 6th and 9th: the samples of 111
        // and 148 ms are 3 and 4 periods.
        for n in [0.0, 1.0, 4.0, 5.0, 9.0] {
            let start = 1000.0 + 37.0 * n;
            pacer.kernel_done(t(start), t(start + 2.0), KernelOutcome::Busy);
            pacer.kernel_done(t(start + 12.0), t(start + 12.1), KernelOutcome::Clear);
        }
        let period = pacer.learned().1.unwrap().as_secs_f64() * 1e3;
        assert!((36.0..38.0).contains(&period), "{period}");
        // A period learned from skipped spells is corrected by a sample a third of it.
        let mut pacer = GapPacer::new();
        for n in [0.0, 3.0, 6.0, 7.0] {
            let start = 1000.0 + 37.0 * n;
            pacer.kernel_done(t(start), t(start + 2.0), KernelOutcome::Busy);
            pacer.kernel_done(t(start + 12.0), t(start + 12.1), KernelOutcome::Clear);
        }
        let period = pacer.learned().1.unwrap().as_secs_f64() * 1e3;
        assert!((36.0..38.0).contains(&period), "{period}");
    }

    #[test]
    fn the_common_period_of_samples_spanning_several_is_found() {
        let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
        let near = |d: Option<Duration>, x: f64| {
            d.is_some_and(|d| (d.as_secs_f64() * 1e3 - x).abs() < 1.5)
        };
        assert!(near(common_period(ms(113.0), ms(75.5), ms(5.0)), 37.5));
        assert!(near(common_period(ms(189.0), ms(37.5), ms(5.0)), 37.5));
        assert!(near(common_period(ms(37.0), ms(37.6), ms(5.0)), 37.0));
        // Nothing in common above the shortest: none.
        assert_eq!(common_period(ms(37.0), ms(50.0), ms(20.0)), None);
    }

    #[test]
    fn before_it_knows_the_period_the_pacer_holds_for_the_cost_bounds_hold() {
        let mut pacer = GapPacer::new();
        pacer.kernel_done(t(10.0), t(12.0), KernelOutcome::Busy);
        assert_eq!(pacer.next_launch(t(12.2), MS, MS * 7), t(19.0));
        // The hold is the caller's: a shorter one applies at once.
        assert_eq!(pacer.next_launch(t(12.2), MS, MS * 2), t(14.0));
        // A clear kernel ends the spell; nothing is predicted from one spell.
        pacer.kernel_done(t(19.0), t(19.1), KernelOutcome::Clear);
        assert_eq!(pacer.next_launch(t(19.3), MS, MS * 7), t(19.3));
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
        assert!(cost.over());
        let quiet = GapReport {
            kernels: 500,
            ..GapReport::default()
        };
        feed(&mut cost, 200, quiet, 50.0);
        assert!(cost.estimate().unwrap() < 0.001);
        assert_eq!(cost.hold(), MIN_HOLD);
        assert!(!cost.over());
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
