//! The one driver of every loop ([`drive`]): a step at each tick of a grid on a clock,
//! until the caller says stop. The agent's workers (on the system clock, through
//! [`crate::Supervisor::run_watched`]), [`crate::FillLoop::run`] and the simulator (on a
//! virtual clock, for `gpufill simulate` and `bench --sim`) all step through it, so they
//! keep one tick grid and one rule for cutting a wait short.

use std::time::Duration;

use crate::hint::{Hint, wait_for_tick};
use crate::time::{Clock, Time, next_tick};

/// What [`drive`] steps: a loop, or a loop with extras around each step.
pub trait Driven {
    /// What one step returns.
    type Step;

    /// One step at `now`.
    fn step(&mut self, now: Time) -> Self::Step;

    /// Between two steps, after a [`Hint`]: whether a newcomer is listed, so that the
    /// next step comes at once ([`crate::FillLoop::newcomer_listed`]). The default:
    /// never.
    fn newcomer_listed(&mut self, now: Time) -> bool {
        let _ = now;
        false
    }
}

/// Steps `driven` every `period` on `clock` until `keep_going` returns false, and
/// returns that last step. A step that overruns its tick is followed by the next one at
/// once, then the grid goes on from there ([`next_tick`]): no burst of catch-up ticks.
/// Between two steps `hint` may cut the wait short: then, for
/// [`crate::hint::WATCH_WINDOW`], [`Driven::newcomer_listed`] is asked every
/// [`crate::hint::WATCH_EVERY`], and a newcomer makes the next step come at once.
pub fn drive<K: Clock, H: Hint, D: Driven + ?Sized>(
    clock: &K,
    period: Duration,
    hint: &mut H,
    driven: &mut D,
    mut keep_going: impl FnMut(&D::Step) -> bool,
) -> D::Step {
    let mut next = clock.now();
    let mut watch_until = None;
    loop {
        let step = driven.step(clock.now());
        if !keep_going(&step) {
            return step;
        }
        next = next_tick(next, period, clock.now());
        watch_until = wait_for_tick(clock, next, hint, watch_until, |now| {
            driven.newcomer_listed(now)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::{HintsAt, NoHint};
    use crate::time::VirtualClock;

    /// Records when it was stepped; a step takes `takes` of the clock; a newcomer is
    /// listed from `newcomer_at`.
    struct Recorder<'a> {
        clock: &'a VirtualClock,
        takes: Duration,
        steps: Vec<Time>,
        newcomer_at: Option<Time>,
    }

    impl Driven for Recorder<'_> {
        type Step = Time;
        fn step(&mut self, now: Time) -> Time {
            self.steps.push(now);
            self.clock.sleep_until(now + self.takes);
            now
        }
        fn newcomer_listed(&mut self, now: Time) -> bool {
            self.newcomer_at.is_some_and(|at| now >= at)
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn steps_on_the_grid_until_told_to_stop_and_returns_the_last_step() {
        let clock = VirtualClock::default();
        let mut r = Recorder {
            clock: &clock,
            takes: Duration::ZERO,
            steps: Vec::new(),
            newcomer_at: None,
        };
        let last = drive(&clock, MS * 50, &mut NoHint, &mut r, |&t| {
            t < Time::ZERO + MS * 200
        });
        assert_eq!(last, Time::ZERO + MS * 200);
        let expected: Vec<Time> = (0..=4).map(|i| Time::ZERO + MS * 50 * i).collect();
        assert_eq!(r.steps, expected);
    }

    #[test]
    fn an_overrun_is_followed_by_one_step_at_once_then_the_grid_goes_on() {
        let clock = VirtualClock::default();
        let mut r = Recorder {
            clock: &clock,
            takes: MS * 120,
            steps: Vec::new(),
            newcomer_at: None,
        };
        drive(&clock, MS * 50, &mut NoHint, &mut r, |_| r_len(&clock) < 3);
        // Each step takes 120 ms against a 50 ms tick: the next comes at once each time,
        // never a burst of catch-up steps.
        assert_eq!(
            r.steps,
            [Time::ZERO, Time::ZERO + MS * 120, Time::ZERO + MS * 240]
        );
    }

    fn r_len(clock: &VirtualClock) -> u64 {
        u64::try_from(clock.now().since_epoch().as_millis() / 120).unwrap()
    }

    #[test]
    fn a_hint_cuts_the_wait_short_only_when_a_newcomer_is_listed() {
        for (newcomer_at, third) in [(Some(80), 81), (None, 100)] {
            let clock = VirtualClock::default();
            let mut r = Recorder {
                clock: &clock,
                takes: Duration::ZERO,
                steps: Vec::new(),
                newcomer_at: newcomer_at.map(|ms| Time::ZERO + MS * ms),
            };
            let mut hint = HintsAt {
                at: [Time::ZERO + MS * 60].into(),
            };
            drive(&clock, MS * 50, &mut hint, &mut r, |&t| {
                t < Time::ZERO + MS * 100
            });
            // The hint at 60 ms opens a window of reads every 3 ms: a newcomer listed at
            // 80 ms is seen at the read at 81 ms, and the next step comes then; with
            // nobody, the grid keeps its time.
            let expected = [0, 50, third].map(|ms| Time::ZERO + MS * ms);
            assert_eq!(r.steps[..3], expected, "{newcomer_at:?}");
        }
    }
}
