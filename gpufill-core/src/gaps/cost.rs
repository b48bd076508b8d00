//! What our kernels charge the live job, estimated from their own timing, and the rate
//! control that holds that estimate under the bound (the module docs of [`super`]).

use std::time::Duration;

use super::{CONTEXT_SWITCH, GapReport, MAX_HOLD, MIN_HOLD};
use crate::time::Time;
use crate::units::Utilization;

/// Under this share of the bound an estimate that went over it is back under
/// ([`GapCost::over`], which the log reports).
const SHRINK_BELOW: f64 = 0.9;

/// The share of the bound that the rate control steers the charges to, of the job's time
/// at work: under the bound with room for the estimate's swings.
const SET_POINT: f64 = 0.8;

/// How far one sample whose charge is under the set point of the job's time at work in
/// it moves the hold's logarithm, per set point of the job's smoothed time at work it is
/// off: a sample with no meeting in which the job worked as usual shortens the hold by a
/// tenth; one in which it did nothing, little. Small, so that the hold moves
/// little between meetings.
const GAIN: f64 = 0.1;

/// The same for a sample over the set point: one whose charge is twice the set point
/// lengthens the hold by a fifth, one beside isolated requests that is six times it (a
/// meeting against the job's 1 % of the GPU) by nearly three times. Twice [`GAIN`], so
/// that a fill that starts at the shortest hold beside such a job is held off within a
/// second of samples (at [`GAIN`] both ways the hold took seconds to grow on a GPU, and
/// the requests paid for them: docs/benchmarks.md, "Filling the gaps of live work"), and
/// the charges settle under the set point, at about half the bound beside isolated
/// requests. Uncapped up to
/// [`MAX_GROWTH`], so that rare, large meeting samples count in full (a cap they reach
/// leaves the average above it).
const GROW_GAIN: f64 = 0.2;

/// The most one sample lengthens the hold by: a first sample's spike (the pacer's first
/// spells, before it knows the job) would otherwise hold off for seconds.
const MAX_GROWTH: f64 = 32.0;

/// How much of the newest sample's charge and job time at work the smoothed ones take
/// in at each NVML sample (the rest is the old); the estimate is their ratio.
const SMOOTHING: f64 = 0.3;

/// The least share of its predicted spells' time that NVML must show a job at work for
/// it to be weighed as a job on a clock: beside an input-bound trainer NVML shows about
/// half of it (its steps' kernels, in spells that last about twice as long);
/// beside requests at random, a period found among them predicts ten times what NVML
/// shows or more (the simulator's burst shapes: spells of a third of the time, NVML 1-3
/// %).
const CLOCK_SEEN: f64 = 0.15;

/// The least job busy share that a sample with a charge counts: below it NVML cannot tell
/// a job's work from nothing, and the estimate stays large rather than unbounded.
const MIN_BUSY: f64 = 0.01;

/// The least job busy share that a sample without a charge counts: a job of requests too
/// short for NVML to show (20 a second of a tenth of a millisecond on the GPU each) is
/// seen only where it meets our kernels, and with nothing counted for the samples between
/// the estimate read what one met request pays (the simulator's 20/s of 0.4 ms: 14 %
/// against 0.1 % paid on the mean, over the metric's rule of three times the cost and a
/// point). At 0.1 % of the time, a request a second of 3 ms or more still counts
/// mostly as what it is (its 200 ms sample shows its spell).
const QUIET_BUSY: f64 = 0.001;
/// The cost estimate and the hold that keeps it under the bound (module docs).
#[derive(Clone, Debug)]
pub struct GapCost {
    /// Each of our kernels' length.
    kernel: Duration,
    /// Since the last sample: what our kernels saw, and since when.
    pending: GapReport,
    since: Option<Time>,
    /// The samples' charges and the job's time at work in them, seconds, smoothed alike
    /// (the estimate is their ratio); `None` before the first sample.
    smoothed: Option<Smoothed>,
    /// The hold after a meeting.
    hold: Duration,
    /// Whether the estimate is over the bound: since it went over it, until it came
    /// back under [`SHRINK_BELOW`] of it (the hold's own thresholds).
    over: bool,
    /// What the last sample's cost was weighed against; `None` before the first.
    weighed: Option<Weighed>,
}

/// The samples' charges and the job's time at work in them, seconds, each smoothed over
/// the samples.
#[derive(Clone, Copy, Debug)]
struct Smoothed {
    charged: f64,
    worked: f64,
}

impl Smoothed {
    /// The estimate: the charges against the time at work (0 with no time at work).
    fn ratio(self) -> f64 {
        if self.worked > 0.0 {
            self.charged / self.worked
        } else {
            0.0
        }
    }
}

/// What a sample's charge was divided by to make its cost, for the log: the job's share of
/// the time, where it came from, and our kernels' share beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weighed {
    /// The job's share of the sample's time that the charge was weighed against, a ratio.
    pub job: f64,
    /// Where that share came from.
    pub by: WeighedBy,
    /// The GPU time our kernels asked for in the sample, a share of it.
    pub ours: f64,
}

/// Where the job's share a cost was weighed against came from: the largest of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeighedBy {
    /// A period the pacer predicts: a job on a clock pays in its rate, against all the
    /// time.
    Clock,
    /// The job's spells of work as our kernels saw them.
    Spells,
    /// NVML's utilization less our kernels' share.
    Nvml,
    /// The least share a sample counts: 1 % with a charge, 0.1 % without.
    Floor,
}

impl std::fmt::Display for WeighedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WeighedBy::Clock => "its period (a job on a clock)",
            WeighedBy::Spells => "its spells as our kernels saw them",
            WeighedBy::Nvml => "NVML's utilization less ours",
            WeighedBy::Floor => "the floor (1 % with a charge, 0.1 % without)",
        })
    }
}

impl GapCost {
    /// A meter for kernels of `kernel`, starting with the shortest hold.
    pub fn new(kernel: Duration) -> Self {
        GapCost {
            kernel,
            pending: GapReport::default(),
            since: None,
            smoothed: None,
            hold: MIN_HOLD,
            over: false,
            weighed: None,
        }
    }

    /// The estimated cost to the live work, a ratio; `None` before an estimate.
    pub fn estimate(&self) -> Option<f64> {
        self.smoothed.map(Smoothed::ratio)
    }

    /// The hold after a meeting in force.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// Whether the estimate is over the bound: from when it went over to when it came
    /// back under 0.9 of it, where the hold shrinks again.
    pub fn over(&self) -> bool {
        self.over
    }

    /// What the last sample's cost was weighed against; `None` before the first.
    pub fn weighed(&self) -> Option<Weighed> {
        self.weighed
    }

    /// The job time that `report`'s meetings cost: a switch and half a kernel each, two
    /// switches and a whole kernel more for each kernel of ours held back, and what the
    /// meetings of stretched kernels cost more ([`GapReport::long_wait`]).
    pub fn charge(&self, report: GapReport) -> Duration {
        let meeting = CONTEXT_SWITCH + self.kernel / 2;
        let preemption = CONTEXT_SWITCH * 2 + self.kernel;
        meeting * report.met + preemption * report.held_back + report.long_wait
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
        self.pending += report;
        let sample = sample?;
        let elapsed = now.saturating_since(since).as_secs_f64();
        if elapsed <= 0.0 {
            return None;
        }
        let ours = self.pending.ours.as_secs_f64() / elapsed;
        // A spell that closes in this sample may stand for more than the sample (its
        // learned length, where its end was not seen): the job cannot work more than all
        // of the time.
        let spells = (self.pending.job_time.as_secs_f64() / elapsed).min(1.0);
        // A job on a clock pays for our kernels in its rate: against all the time. Only
        // where NVML shows the job at work for a fair share of what the prediction says
        // (CLOCK_SEEN): a pacer can find a period in requests that come at random, and a
        // service of sub-millisecond requests weighed as a clock is charged a fiftieth
        // of what its requests pay.
        let nvml_job = sample.fraction() - ours;
        let on_clock = match self.pending.clock {
            Some(clock) if nvml_job >= CLOCK_SEEN * clock.busy_share() => 1.0,
            _ => 0.0,
        };
        let (busy, by) = [
            (on_clock, WeighedBy::Clock),
            (spells, WeighedBy::Spells),
            (nvml_job, WeighedBy::Nvml),
        ]
        .into_iter()
        .fold((0.0, WeighedBy::Floor), |best, next| {
            if next.0 > best.0 { next } else { best }
        });
        let charge = self.charge(self.pending).as_secs_f64();
        // A charged sample's job worked at least the floor's share of it.
        let floor = if charge > 0.0 { MIN_BUSY } else { QUIET_BUSY };
        let (busy, by) = if busy < floor {
            (floor, WeighedBy::Floor)
        } else {
            (busy, by)
        };
        self.weighed = Some(Weighed {
            job: busy,
            by,
            ours,
        });
        let worked = busy * elapsed;
        let smoothed = match self.smoothed {
            Some(old) => Smoothed {
                charged: old.charged + SMOOTHING * (charge - old.charged),
                worked: old.worked + SMOOTHING * (worked - old.worked),
            },
            None => Smoothed {
                charged: charge,
                worked,
            },
        };
        self.smoothed = Some(smoothed);
        let estimate = smoothed.ratio();
        self.pending = GapReport::default();
        self.since = Some(now);
        if estimate > max_cost {
            self.over = true;
        } else if estimate < max_cost * SHRINK_BELOW {
            self.over = false;
        }
        // Integral control of the hold's logarithm by each sample's charge against the
        // set point of the job's time at work in it, as a share of the set point of its
        // smoothed time at work, faster up than down: the charges settle at or under the
        // set point of the job's time at work, whatever share of the samples has a
        // meeting (beside isolated requests a meeting sample costs several times the
        // bound, and most samples have none), and a sample in which the job did nothing
        // moves it little. A job that costs less than the set point at the shortest hold
        // keeps it.
        let target = max_cost * SET_POINT;
        let step = if target > 0.0 {
            let scale = target * smoothed.worked.max(MIN_BUSY * elapsed);
            let error = (charge - target * worked) / scale;
            let gain = if error > 0.0 { GROW_GAIN } else { GAIN };
            (gain * error).min(MAX_GROWTH.ln())
        } else {
            // A bound of 0: nothing may be charged, so the hold only grows.
            MAX_GROWTH.ln()
        };
        let hold = Duration::from_secs_f64(
            (self.hold.as_secs_f64() * step.exp())
                .clamp(MIN_HOLD.as_secs_f64(), MAX_HOLD.as_secs_f64()),
        );
        (hold != self.hold).then(|| {
            self.hold = hold;
            hold
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gaps::{Clock, GAP_KERNEL, STRETCH_KERNEL};

    const K: Duration = Duration::from_micros(100);

    /// `kernels` short kernels of ours, `met` of them meeting the job.
    fn short(kernels: u32, met: u32) -> GapReport {
        GapReport {
            kernels,
            ours: GAP_KERNEL * kernels,
            met,
            ..GapReport::default()
        }
    }

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

    #[test]
    fn a_stretched_kernel_that_meets_the_job_is_charged_half_of_it() {
        let cost = GapCost::new(GAP_KERNEL);
        let short = cost.charge(GapReport {
            met: 1,
            ..GapReport::default()
        });
        let long = cost.charge(GapReport {
            met: 1,
            long_wait: (STRETCH_KERNEL - GAP_KERNEL) / 2,
            ..GapReport::default()
        });
        assert_eq!(long - short, (STRETCH_KERNEL - GAP_KERNEL) / 2);
    }

    #[test]
    fn a_job_on_a_clock_is_charged_against_its_rate() {
        // 5 meetings in 200 ms beside a job at 20 % of the GPU.
        let report = short(10, 5);
        let mut latency = GapCost::new(K);
        feed(&mut latency, 1, report, 20.0);
        let mut rate = GapCost::new(K);
        let on_clock = GapReport {
            clock: Some(Clock {
                period: MS * 37,
                spell: MS * 12,
            }),
            ..report
        };
        feed(&mut rate, 1, on_clock, 20.0);
        // 5 x 186 us in 200 ms: 0.47 % of the time; of the job's busy 19.5 %, 2.4 %.
        let (l, r) = (latency.estimate().unwrap(), rate.estimate().unwrap());
        assert!((0.0046..0.0048).contains(&r), "{r}");
        assert!((0.023..0.025).contains(&l), "{l}");
    }

    #[test]
    fn our_share_is_what_our_kernels_asked_stretched_ones_at_their_length() {
        // 100 kernels of 500 us in 200 ms: 25 % of the GPU is ours; NVML reads 30 %, so
        // the job's is 5 %, not the 25 % that 100 short kernels would leave.
        let report = GapReport {
            kernels: 100,
            ours: STRETCH_KERNEL * 100,
            met: 2,
            ..GapReport::default()
        };
        let mut cost = GapCost::new(K);
        feed(&mut cost, 1, report, 30.0);
        // 2 x 186 us in 200 ms against the job's 5 %: 3.7 %.
        let estimate = cost.estimate().unwrap();
        assert!((0.0365..0.0375).contains(&estimate), "{estimate}");
    }

    #[test]
    fn the_jobs_time_at_work_counts_at_most_all_of_a_sample() {
        // A spell that closes stands for its learned 800 ms in a 200 ms sample.
        let report = GapReport {
            job_time: MS * 800,
            ..short(10, 5)
        };
        let mut cost = GapCost::new(K);
        feed(&mut cost, 1, report, 20.0);
        // 5 x 186 us in 200 ms against all of the time: 0.47 %, not a quarter of it.
        let estimate = cost.estimate().unwrap();
        assert!((0.0046..0.0048).contains(&estimate), "{estimate}");
    }

    #[test]
    fn a_meeting_costs_a_switch_and_half_a_kernel_and_a_held_back_kernel_more() {
        let cost = GapCost::new(K);
        let met = short(10, 1);
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
        let report = short(100, 5);
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
        let report = short(4, 4);
        feed(&mut cost, 3, report, 1.5);
        assert!(cost.estimate().unwrap() > 0.25, "{:?}", cost.estimate());
        feed(&mut cost, 100, report, 1.5);
        assert_eq!(cost.hold(), MAX_HOLD);
    }

    #[test]
    fn a_single_spike_grows_the_hold_once_and_it_shrinks_while_the_estimate_decays() {
        let mut cost = GapCost::new(K);
        let start = Time::ZERO + Duration::from_secs(1);
        let sample = Duration::from_millis(200);
        cost.update(start, GapReport::default(), None, 0.02);
        // The pacer's first spells: 60 meetings in one sample.
        let spike = short(100, 60);
        let grown = cost
            .update(start + sample, spike, Some(pct(10.0)), 0.02)
            .unwrap();
        assert!(
            grown > MIN_HOLD * 2 && grown <= MIN_HOLD.mul_f64(MAX_GROWTH),
            "{grown:?}"
        );
        // Then nothing met: the smoothed estimate stays over the bound for a while, and
        // the hold shrinks at every one of these samples (it is steered by each sample's
        // own cost, not by the estimate that still remembers the spike).
        let clear = short(100, 0);
        let mut last = grown;
        for i in 2..=8 {
            cost.update(start + sample * i, clear, Some(pct(10.0)), 0.02);
            assert!(cost.over(), "{:?} at {i}", cost.estimate());
            assert!(cost.hold() < last, "at {i}: {:?}", cost.hold());
            last = cost.hold();
        }
    }

    #[test]
    fn beside_isolated_requests_the_estimate_settles_under_the_bound() {
        // A job of isolated requests at 1 % of the GPU (NVML reads our 15 % and its 1 %),
        // as the pacer meets them: after each meeting the hold in force (re-timed as it
        // changes) passes before the next, which then comes within a sample. Each
        // meeting sample costs several times the bound against the job's 1 %, and most
        // samples have none.
        let mut cost = GapCost::new(K);
        let sample = Duration::from_millis(200);
        let mut now = Time::ZERO + Duration::from_secs(1);
        cost.update(now, GapReport::default(), None, 0.02);
        let (met, quiet) = (short(300, 1), short(300, 0));
        let mut last_met = now;
        let mut estimates = Vec::new();
        for _ in 0..3000 {
            now += sample;
            let meets = now.saturating_since(last_met) >= cost.hold();
            if meets {
                last_met = now;
            }
            cost.update(now, if meets { met } else { quiet }, Some(pct(16.0)), 0.02);
            estimates.push(cost.estimate().unwrap());
        }
        // Under the set point (the hold grows faster than it shrinks), not far under it.
        let mean = estimates[500..].iter().sum::<f64>() / 2500.0;
        assert!(
            (0.02 * SET_POINT * 0.4..=0.02 * SET_POINT).contains(&mean),
            "{mean}"
        );
    }

    #[test]
    fn samples_in_which_the_job_did_nothing_do_not_water_the_estimate_down() {
        // A request a second, 3.6 ms at work, met by a kernel of ours: one sample in
        // five has it, and in the others the job does nothing (NVML reads our 5 %). Its
        // requests pay 186 us on 3.6 ms, 5.2 %; the four quiet samples count 0.1 % of
        // their 200 ms each (QUIET_BUSY), so the estimate reads 186 us on 4.4 ms, 4.2 %.
        // An average of the samples' own costs read a fifth of that or less, and a
        // service of rare requests paid several times the bound (the simulator's 1/s of
        // 3 ms: 4.3 % at p50).
        let met = GapReport {
            job_time: Duration::from_micros(3600),
            ..short(100, 1)
        };
        let mut cost = GapCost::new(K);
        let sample = Duration::from_millis(200);
        let start = Time::ZERO + Duration::from_secs(1);
        cost.update(start, GapReport::default(), None, 0.02);
        let (mut lowest, mut highest) = (f64::MAX, 0.0_f64);
        for i in 1..=100 {
            let report = if i % 5 == 0 { met } else { short(100, 0) };
            cost.update(start + sample * i, report, Some(pct(5.0)), 0.02);
            if i > 50 {
                lowest = lowest.min(cost.estimate().unwrap());
                highest = highest.max(cost.estimate().unwrap());
            }
        }
        assert!(lowest >= 0.03 && highest <= 0.052, "{lowest}..{highest}");
        // Where NVML shows the job at work in the other samples too (3.6 ms in each,
        // unmet), the same charge is worth a fifth as much.
        let mut busy = GapCost::new(K);
        busy.update(start, GapReport::default(), None, 0.02);
        for i in 1..=100 {
            let report = if i % 5 == 0 { met } else { short(100, 0) };
            busy.update(start + sample * i, report, Some(pct(6.8)), 0.02);
        }
        let diluted = busy.estimate().unwrap();
        assert!((0.005..0.02).contains(&diluted), "{diluted}");
    }

    #[test]
    fn beside_work_that_nvml_cannot_show_the_estimate_falls_between_meetings() {
        // Requests too short for NVML (it reads our 5 % and nothing of theirs) and of no
        // spell length: a meeting sample counts the job at 1 % of it; the quiet samples
        // after it count 0.1 % each, so the estimate falls as they pass instead of
        // holding what one met request pays until the next (the simulator's 20/s of
        // 0.4 ms read 14 % against 0.1 % paid).
        let mut cost = GapCost::new(K);
        let sample = Duration::from_millis(200);
        let start = Time::ZERO + Duration::from_secs(1);
        cost.update(start, GapReport::default(), None, 0.02);
        cost.update(start + sample, short(100, 1), Some(pct(5.0)), 0.02);
        let met = cost.estimate().unwrap();
        let mut last = met;
        for i in 2..=11 {
            cost.update(start + sample * i, short(100, 0), Some(pct(5.0)), 0.02);
            let now = cost.estimate().unwrap();
            assert!(now < last, "at {i}: {now} after {last}");
            last = now;
        }
        assert!(last < met / 2.0, "{last} after {met}");
    }

    #[test]
    fn each_sample_says_what_its_cost_was_weighed_against() {
        let by = |report: GapReport, util: f64| {
            let mut cost = GapCost::new(K);
            feed(&mut cost, 1, report, util);
            let w = cost.weighed().unwrap();
            (
                w.by,
                (w.job * 1e3).round() / 1e3,
                (w.ours * 1e3).round() / 1e3,
            )
        };
        // 200 ms samples: 100 short kernels are 5 % of one.
        assert_eq!(by(short(100, 1), 5.0), (WeighedBy::Floor, 0.01, 0.05));
        assert_eq!(by(short(100, 1), 25.0), (WeighedBy::Nvml, 0.2, 0.05));
        let spells = GapReport {
            job_time: Duration::from_millis(60),
            ..short(100, 1)
        };
        assert_eq!(by(spells, 25.0), (WeighedBy::Spells, 0.3, 0.05));
        // Spells of 20 ms every 37 ms predicted: a clock where NVML shows the job at work
        // (20 % of the GPU beside our 5 %), not where it shows 3 %, as beside requests
        // at random in which the pacer found a period.
        let clock = GapReport {
            clock: Some(Clock {
                period: Duration::from_millis(37),
                spell: Duration::from_millis(20),
            }),
            ..spells
        };
        assert_eq!(by(clock, 25.0), (WeighedBy::Clock, 1.0, 0.05));
        assert_eq!(by(clock, 8.0), (WeighedBy::Spells, 0.3, 0.05));
    }

    #[test]
    fn from_the_shortest_hold_beside_isolated_requests_it_is_held_off_within_a_second() {
        // One request met a sample (the job 1 % of the GPU): six times the set point.
        let mut cost = GapCost::new(K);
        feed(&mut cost, 5, short(20, 1), 1.0);
        assert!(cost.hold() >= MIN_HOLD * 20, "{:?}", cost.hold());
    }

    #[test]
    fn the_hold_shrinks_again_once_nothing_is_met() {
        let mut cost = GapCost::new(K);
        let met = GapReport {
            held_back: 1,
            ..short(4, 4)
        };
        feed(&mut cost, 10, met, 10.0);
        let long = cost.hold();
        assert!(long > MIN_HOLD * 10, "{long:?}");
        assert!(cost.over());
        let quiet = short(500, 0);
        feed(&mut cost, 200, quiet, 50.0);
        assert!(cost.estimate().unwrap() < 0.001);
        assert_eq!(cost.hold(), MIN_HOLD);
        assert!(!cost.over());
    }

    #[test]
    fn a_bound_of_zero_holds_off_longest() {
        let mut cost = GapCost::new(K);
        let quiet = short(100, 0);
        feed(&mut cost, 1, quiet, 10.0);
        let mut zero = GapCost::new(K);
        let start = Time::ZERO + Duration::from_secs(1);
        zero.update(start, GapReport::default(), None, 0.0);
        for i in 1..=10 {
            zero.update(
                start + Duration::from_millis(200) * i,
                quiet,
                Some(pct(10.0)),
                0.0,
            );
        }
        assert_eq!((cost.hold(), zero.hold()), (MIN_HOLD, MAX_HOLD));
    }

    #[test]
    fn nothing_changes_between_samples() {
        let mut cost = GapCost::new(K);
        let report = short(4, 4);
        assert_eq!(cost.update(Time::ZERO, report, None, 0.02), None);
        assert_eq!(cost.estimate(), None);
        assert_eq!(cost.hold(), MIN_HOLD);
    }
}
