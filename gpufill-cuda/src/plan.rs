//! The launcher's arithmetic, kept pure so CI tests it without a GPU: how a duty turns
//! into a burst of kernels, when a burst is due ([`Pacer`]), and how long the idle gap
//! after each kernel is when one kernel is in flight at a time ([`one_in_flight_gap`],
//! [`Cycle`]).

use std::time::Duration;

use gpufill_core::Time;
use gpufill_core::gaps::{GAP_KERNEL, MIN_GAP};

/// Bursts shorter than this are not launched: a kernel's launch and teardown cost a few
/// microseconds, so the GPU would mostly see overhead.
pub const MIN_BURST: Duration = Duration::from_micros(5);

/// The kernels of one period: `count` kernels of `kernel` each, back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Burst {
    /// How many kernels.
    pub count: u32,
    /// The length of each.
    pub kernel: Duration,
}

impl Burst {
    /// The total time the burst keeps a kernel resident.
    pub fn on_time(&self) -> Duration {
        self.kernel * self.count
    }
}

/// The burst for `duty` over `elapsed` (the time since the previous burst began; one
/// `period` at the usual spacing), in kernels no longer than `max_kernel`. `None` when
/// the burst would be shorter than [`MIN_BURST`].
///
/// The kernel count is that of the period's burst, `ceil(duty x period / max_kernel)`,
/// and the on-time `duty x elapsed` is split evenly among them, so every kernel is as
/// long as possible (fewer launches for the same on-time) and a tick a few microseconds
/// late does not cost an extra launch. What does not fit in those kernels is dropped
/// (only when `duty x period` is a whole number of kernels, and only the lateness: the
/// controller makes up for it).
pub fn plan_burst(
    duty: f64,
    period: Duration,
    elapsed: Duration,
    max_kernel: Duration,
) -> Option<Burst> {
    let duty = if duty.is_nan() {
        0.0
    } else {
        duty.clamp(0.0, 1.0)
    };
    if max_kernel.is_zero() {
        return None;
    }
    let max_ns = max_kernel.as_nanos();
    let count = period.mul_f64(duty).as_nanos().div_ceil(max_ns).max(1);
    let on_ns = elapsed.mul_f64(duty).as_nanos().min(count * max_ns);
    if on_ns < MIN_BURST.as_nanos() {
        return None;
    }
    let count = u32::try_from(count).ok()?;
    let kernel_ns = u64::try_from(on_ns / u128::from(count)).ok()?;
    Some(Burst {
        count,
        kernel: Duration::from_nanos(kernel_ns),
    })
}

/// What a launcher does at one call of [`Pacer::pace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// No period begins now (or its burst would be too short): launch nothing.
    Wait,
    /// A period begins, but the previous burst is still running past what was planned
    /// (slowed by another context's time slices): skip it, so work never piles up.
    Skip,
    /// A period begins: launch this burst.
    Launch(Burst),
}

/// Paces bursts for a launcher driven from the caller's thread: the fill loop calls it
/// at every tick, right after it read the process list, and a burst starts only at
/// such a call. Pure arithmetic on the times it is given.
///
/// - A period begins at the first call at least three quarters of a period after the
///   previous one began (ticks that divide the period land a period apart, give or take
///   their jitter). Its burst covers the time since then, `duty x elapsed`, so the duty
///   holds whatever the jitter of the calls; elapsed counts at most 1.25 periods, so a
///   caller that overran gets no catch-up burst.
/// - A burst goes behind a previous one still queued only when that one is due to end
///   within a tenth of a period of now (full duty: the GPU never idles between bursts);
///   otherwise the period is skipped. So at most 1.35 periods of work are ever queued
///   (a tenth of one plus a late burst), and at most 1.1 periods at the usual spacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacer {
    period: Duration,
    /// When the current period began; `None` while idle (the next call starts one).
    started: Option<Time>,
    /// When the work queued so far is planned to end.
    busy_until: Time,
    /// Whole periods that passed with no call at all (the caller overran).
    missed: u64,
}

impl Pacer {
    /// A pacer for `period`, idle.
    pub fn new(period: Duration) -> Self {
        Pacer {
            period,
            started: None,
            busy_until: Time::ZERO,
            missed: 0,
        }
    }

    /// The load went idle: the next call with a duty starts a period at once.
    pub fn stop(&mut self) {
        self.started = None;
    }

    /// Stops, as [`Pacer::stop`], with work launched elsewhere (the one-in-flight
    /// thread's last kernel) planned to end at `busy_until`: the next call starts a
    /// period at once and queues its burst behind that kernel rather than skipping the
    /// period because of it (a kernel ending within a tenth of a period of the call).
    pub fn resume_after(&mut self, busy_until: Time) {
        self.started = None;
        self.busy_until = busy_until;
    }

    /// Whole periods that passed without a call (each one a period with no burst).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// At `now`, with `duty`, kernels of at most `max_kernel`, and `queued_done` telling
    /// whether the work launched so far has finished (the launcher's event).
    pub fn pace(&mut self, now: Time, duty: f64, max_kernel: Duration, queued_done: bool) -> Pace {
        let elapsed = match self.started {
            None => self.period,
            Some(started) => {
                let since = now - started;
                if since < self.period - self.period / 4 {
                    return Pace::Wait;
                }
                let whole = since.as_nanos() / self.period.as_nanos().max(1);
                self.missed += u64::try_from(whole.saturating_sub(1)).unwrap_or(u64::MAX);
                since.min(self.period + self.period / 4)
            }
        };
        self.started = Some(now);
        let slack = self.period / 10;
        if !queued_done && (self.busy_until > now + slack || now > self.busy_until + slack) {
            return Pace::Skip;
        }
        let Some(burst) = plan_burst(duty, self.period, elapsed, max_kernel) else {
            return Pace::Wait;
        };
        let from = if queued_done {
            now
        } else {
            self.busy_until.max(now)
        };
        self.busy_until = from + burst.on_time();
        Pace::Launch(burst)
    }
}

/// How long to sleep before polling a late burst again: starts at `first`, doubles,
/// and never goes past `cap`. A burst that is only a little late (its last kernel ends
/// microseconds after the period starts, as at full duty) is caught at once; one that
/// is slowed by another process costs a few wake-ups, not hundreds.
pub fn backoff(first: Duration, cap: Duration, attempt: u32) -> Duration {
    first.saturating_mul(1u32 << attempt.min(16)).min(cap)
}

/// The idle gap after each kernel of length `kernel` when one kernel is in flight at a
/// time, so that a kernel and its gap hold `duty`: `kernel x (1 - duty) / duty`.
///
/// `None` when the duty asks for nothing (0, negative or NaN): launch nothing. A duty
/// of 1 or more is no gap at all (the next kernel follows as soon as the last one is
/// seen to finish: still one in flight). A duty so small that the gap does not fit a
/// [`Duration`] is [`Duration::MAX`]: in effect, nothing until the duty changes.
///
/// The gap is counted from when the kernel is seen to finish, so the poll's lateness
/// and the launch overhead lower the duty a little (as measured with 500 us kernels:
/// docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps, "CPU, and
/// what it was traded for"); the controller makes up for it, as it does for bursts.
pub fn one_in_flight_gap(duty: f64, kernel: Duration) -> Option<Duration> {
    if duty.is_nan() || duty <= 0.0 {
        return None;
    }
    if duty >= 1.0 {
        return Some(Duration::ZERO);
    }
    let gap = kernel.as_secs_f64() * ((1.0 - duty) / duty);
    Some(Duration::try_from_secs_f64(gap).unwrap_or(Duration::MAX))
}

/// What the pacing thread launches, one kernel at a time: the shapes
/// [`LaunchShape::OneInFlight`](gpufill_core::LaunchShape) and
/// [`LaunchShape::Gaps`](gpufill_core::LaunchShape) share the cycle (launch, rest,
/// judge) and differ in the kernel, the shortest gap and what a kernel that met another
/// context leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cycle {
    /// Beside a quiet holder: kernels of `kernel` (the launcher's `beside_kernel`), the
    /// duty's gap; a kernel held back or whose timing shows another context is reported
    /// to the loop, and nothing more is launched until it answers.
    OneInFlight {
        /// The length of each kernel.
        kernel: Duration,
    },
    /// Filling the gaps of live work: kernels of [`GAP_KERNEL`], the duty's gap but at
    /// least [`MIN_GAP`]; a kernel that met another context is counted in the gap report
    /// and followed by the hold the loop set, then the thread goes on by itself.
    Gaps,
}

impl Cycle {
    /// The length of each kernel.
    pub fn kernel(self) -> Duration {
        match self {
            Cycle::OneInFlight { kernel } => kernel,
            Cycle::Gaps => GAP_KERNEL,
        }
    }

    /// The idle gap after each kernel for `duty` ([`one_in_flight_gap`]); while filling
    /// gaps never shorter than [`MIN_GAP`], so that a job that is ready when our kernel
    /// ends gets the GPU before our next launch. `None`: launch nothing.
    pub fn gap(self, duty: f64) -> Option<Duration> {
        self.gap_after(duty, self.kernel())
    }

    /// The idle gap after a kernel of `kernel` for `duty`, as [`Cycle::gap`] (while filling
    /// gaps the pacer may stretch a kernel: `gpufill_core::GapPacer::kernel_for`).
    pub fn gap_after(self, duty: f64, kernel: Duration) -> Option<Duration> {
        let gap = one_in_flight_gap(duty, kernel)?;
        Some(match self {
            Cycle::OneInFlight { .. } => gap,
            Cycle::Gaps => gap.max(MIN_GAP),
        })
    }

    /// A lowercase name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Cycle::OneInFlight { .. } => "one_in_flight",
            Cycle::Gaps => "gaps",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn burst(duty: f64) -> Option<Burst> {
        plan_burst(duty, 20 * MS, 20 * MS, 2 * MS)
    }

    #[test]
    fn half_duty_on_twenty_ms_is_five_kernels_of_two_ms() {
        assert_eq!(
            burst(0.5),
            Some(Burst {
                count: 5,
                kernel: 2 * MS
            })
        );
        assert_eq!(
            burst(0.9),
            Some(Burst {
                count: 9,
                kernel: 2 * MS
            })
        );
        assert_eq!(
            burst(1.0),
            Some(Burst {
                count: 10,
                kernel: 2 * MS
            })
        );
    }

    #[test]
    fn uneven_on_times_are_split_into_equal_kernels_below_the_maximum() {
        let b = burst(0.55).unwrap();
        assert_eq!(b.count, 6);
        assert!(b.kernel <= 2 * MS);
        assert!((11 * MS).saturating_sub(b.on_time()) < Duration::from_nanos(6));
        let b = burst(0.01).unwrap();
        assert_eq!(
            b,
            Burst {
                count: 1,
                kernel: Duration::from_micros(200)
            }
        );
    }

    #[test]
    fn bursts_under_five_microseconds_are_skipped() {
        assert_eq!(burst(0.0), None);
        assert_eq!(burst(0.0002), None); // 4 us
        assert!(burst(0.0003).is_some()); // 6 us
        assert_eq!(burst(f64::NAN), None);
    }

    #[test]
    fn duty_beyond_one_is_clamped() {
        assert_eq!(burst(3.0), burst(1.0));
    }

    fn ms(n: u64) -> Time {
        Time::from_millis(n)
    }

    fn launched(p: Pace) -> Burst {
        match p {
            Pace::Launch(b) => b,
            other => panic!("expected a burst, got {other:?}"),
        }
    }

    #[test]
    fn ticks_of_a_period_launch_every_time_and_half_period_ticks_every_other_time() {
        let mut p = Pacer::new(20 * MS);
        // Idle: the first call launches a whole period's burst at once.
        assert_eq!(
            launched(p.pace(ms(3), 0.5, 2 * MS, true)).on_time(),
            10 * MS
        );
        let mut paces = Vec::new();
        for t in (13..=203).step_by(10) {
            paces.push(p.pace(ms(t), 0.5, 2 * MS, true));
        }
        let bursts = paces
            .iter()
            .filter(|p| matches!(p, Pace::Launch(_)))
            .count();
        assert_eq!(bursts, 10, "{paces:?}");
        assert!(
            paces.iter().step_by(2).all(|p| *p == Pace::Wait),
            "{paces:?}"
        );
    }

    #[test]
    fn jittery_calls_keep_the_duty_because_each_burst_covers_the_time_since_the_last() {
        let mut p = Pacer::new(20 * MS);
        let mut on = Duration::ZERO;
        let calls = [0, 21, 39, 62, 80, 99, 121, 140];
        for t in calls {
            if let Pace::Launch(b) = p.pace(ms(t), 0.42, 2 * MS, true) {
                assert_eq!(b.count, 5, "{b:?}");
                on += b.on_time();
            }
        }
        // 140 ms since the first period began, plus the first period: 160 ms at 42 %.
        let error = on.abs_diff(Duration::from_micros(67_200));
        assert!(error < Duration::from_micros(10), "{on:?}");
    }

    #[test]
    fn a_late_tick_never_costs_an_extra_kernel_or_a_longer_one() {
        // 50 % of 20 ms is exactly five 2 ms kernels: a tick 0.1 ms late keeps five, and
        // the 50 us that would not fit is dropped rather than launched as a sixth.
        let b = plan_burst(0.5, 20 * MS, Duration::from_micros(20_100), 2 * MS).unwrap();
        assert_eq!(
            b,
            Burst {
                count: 5,
                kernel: 2 * MS
            }
        );
        // 45 %: five kernels of 1.8 ms have room, so the lateness is covered.
        let b = plan_burst(0.45, 20 * MS, Duration::from_micros(20_100), 2 * MS).unwrap();
        assert_eq!(b.count, 5);
        assert_eq!(b.on_time(), Duration::from_nanos(9_045_000));
        // Early: the same kernels, shorter.
        let b = plan_burst(0.5, 20 * MS, 16 * MS, 2 * MS).unwrap();
        assert_eq!(
            b,
            Burst {
                count: 5,
                kernel: Duration::from_micros(1600)
            }
        );
    }

    #[test]
    fn a_caller_that_overran_gets_at_most_a_period_and_a_quarter_and_the_gap_counts_as_missed() {
        let mut p = Pacer::new(20 * MS);
        p.pace(ms(0), 0.9, 2 * MS, true);
        let b = launched(p.pace(ms(95), 0.85, 2 * MS, true));
        // 1.25 periods at 85 %: 21.25 ms, capped by the period's nine 2 ms kernels.
        assert_eq!(b.on_time(), 18 * MS);
        assert_eq!(b.count, 9);
        assert_eq!(p.missed(), 3);
    }

    #[test]
    fn full_duty_queues_behind_a_burst_that_is_just_ending() {
        let mut p = Pacer::new(20 * MS);
        p.pace(ms(0), 1.0, 2 * MS, true);
        // The 20 ms burst has not quite finished at the next tick: launched behind it.
        let b = launched(p.pace(ms(20), 1.0, 2 * MS, false));
        assert_eq!(b.on_time(), 20 * MS);
        // A tick 0.3 ms late: ten 2 ms kernels again (the 0.3 ms does not fit them).
        let b = launched(p.pace(
            Time::from_duration(Duration::from_micros(40_300)),
            1.0,
            2 * MS,
            false,
        ));
        assert_eq!(b.on_time(), 20 * MS);
        // Still running 2.7 ms past its planned end (60.3 ms): skipped, not queued.
        assert_eq!(p.pace(ms(63), 1.0, 2 * MS, false), Pace::Skip);
    }

    #[test]
    fn a_burst_slowed_past_its_plan_skips_the_period_instead_of_queueing() {
        let mut p = Pacer::new(20 * MS);
        p.pace(ms(0), 0.5, 2 * MS, true);
        // Planned to end at 10 ms; still running at 20 ms (another context had the GPU).
        assert_eq!(p.pace(ms(20), 0.5, 2 * MS, false), Pace::Skip);
        // The skipped period still counts as begun: next chance one period later.
        assert_eq!(p.pace(ms(30), 0.5, 2 * MS, true), Pace::Wait);
        assert!(matches!(p.pace(ms(40), 0.5, 2 * MS, true), Pace::Launch(_)));
    }

    #[test]
    fn stopping_makes_the_next_duty_start_at_once() {
        let mut p = Pacer::new(20 * MS);
        p.pace(ms(0), 0.5, 2 * MS, true);
        assert_eq!(p.pace(ms(5), 0.5, 2 * MS, true), Pace::Wait);
        p.stop();
        assert!(matches!(p.pace(ms(6), 0.5, 2 * MS, true), Pace::Launch(_)));
    }

    #[test]
    fn a_duty_too_small_for_a_kernel_launches_nothing() {
        let mut p = Pacer::new(20 * MS);
        assert_eq!(p.pace(ms(0), 0.0, 2 * MS, true), Pace::Wait);
        assert_eq!(p.pace(ms(20), 0.0001, 2 * MS, true), Pace::Wait);
    }

    #[test]
    fn after_one_in_flight_the_first_burst_queues_behind_the_last_kernel_instead_of_skipping() {
        let mut p = Pacer::new(20 * MS);
        p.pace(ms(0), 0.5, 2 * MS, true);
        // The thread's last kernel ends 0.4 ms from now, and it is still running.
        p.resume_after(Time::from_duration(Duration::from_micros(5_400)));
        let b = launched(p.pace(ms(5), 0.5, 2 * MS, false));
        assert_eq!(b.on_time(), 10 * MS, "a whole period's burst at once");
        // Then the usual spacing: the next period one period later.
        assert_eq!(p.pace(ms(15), 0.5, 2 * MS, true), Pace::Wait);
        assert!(matches!(p.pace(ms(25), 0.5, 2 * MS, true), Pace::Launch(_)));
    }

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn half_duty_one_in_flight_rests_as_long_as_the_kernel() {
        assert_eq!(one_in_flight_gap(0.5, 500 * US), Some(500 * US));
        assert_eq!(one_in_flight_gap(0.25, 500 * US), Some(1500 * US));
        assert_eq!(one_in_flight_gap(0.8, 500 * US), Some(125 * US));
        // A kernel and its gap hold the duty.
        for duty in [0.01, 0.1, 0.33, 0.5, 0.9, 0.99] {
            let kernel = 500 * US;
            let gap = one_in_flight_gap(duty, kernel).unwrap();
            let held = kernel.as_secs_f64() / (kernel + gap).as_secs_f64();
            assert!((held - duty).abs() < 1e-6, "{duty}: {held}");
        }
    }

    #[test]
    fn full_duty_one_in_flight_has_no_gap_and_beyond_is_clamped() {
        assert_eq!(one_in_flight_gap(1.0, 500 * US), Some(Duration::ZERO));
        assert_eq!(one_in_flight_gap(3.0, 500 * US), Some(Duration::ZERO));
        assert_eq!(
            one_in_flight_gap(f64::INFINITY, 500 * US),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn no_duty_one_in_flight_launches_nothing_and_a_tiny_one_waits_without_overflow() {
        assert_eq!(one_in_flight_gap(0.0, 500 * US), None);
        assert_eq!(one_in_flight_gap(-0.5, 500 * US), None);
        assert_eq!(one_in_flight_gap(f64::NAN, 500 * US), None);
        assert_eq!(one_in_flight_gap(1e-300, 500 * US), Some(Duration::MAX));
        let gap = one_in_flight_gap(1e-4, 500 * US).unwrap();
        assert!(
            gap.abs_diff(Duration::from_micros(4_999_500)) < US,
            "{gap:?}"
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let first = Duration::from_micros(50);
        assert_eq!(backoff(first, MS, 0), first);
        assert_eq!(backoff(first, MS, 2), Duration::from_micros(200));
        assert_eq!(backoff(first, MS, 5), MS);
        assert_eq!(backoff(first, MS, 60), MS);
    }

    #[test]
    fn filling_gaps_rests_the_duty_s_gap_but_never_less_than_min_gap() {
        let gaps = Cycle::Gaps;
        assert_eq!(gaps.kernel(), GAP_KERNEL);
        // 100 us kernels at 30 %: 233 us, above MIN_GAP.
        let gap = gaps.gap(0.3).unwrap();
        assert!(gap.abs_diff(Duration::from_nanos(233_333)) < US, "{gap:?}");
        assert_eq!(gap, one_in_flight_gap(0.3, GAP_KERNEL).unwrap());
        // From 40 % up the duty's gap is shorter than MIN_GAP: MIN_GAP it is.
        for duty in [0.41, 0.5, 0.9, 1.0, 3.0] {
            assert_eq!(gaps.gap(duty), Some(MIN_GAP), "{duty}");
        }
        // No duty: nothing, as one in flight.
        assert_eq!(gaps.gap(0.0), None);
        assert_eq!(gaps.gap(f64::NAN), None);
    }

    #[test]
    fn one_in_flight_keeps_its_kernel_and_the_duty_s_gap_even_below_min_gap() {
        let cycle = Cycle::OneInFlight { kernel: 500 * US };
        assert_eq!(cycle.kernel(), 500 * US);
        assert_eq!(cycle.gap(0.9), one_in_flight_gap(0.9, 500 * US));
        assert_eq!(cycle.gap(1.0), Some(Duration::ZERO));
        assert!(cycle.gap(0.9).unwrap() < MIN_GAP);
        assert_eq!(cycle.as_str(), "one_in_flight");
        assert_eq!(Cycle::Gaps.as_str(), "gaps");
    }
}
