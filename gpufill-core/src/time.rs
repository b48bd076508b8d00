//! Time as the core sees it: points on a monotonic timeline that the caller supplies.
//!
//! The core never reads a clock. Every function that needs the time takes a [`Time`];
//! the only real clock is [`SystemClock`], used by the binary and the hardware crates,
//! and the simulated GPU runs on a [`VirtualClock`] that jumps instead of sleeping.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point on a monotonic timeline, as the time elapsed since the timeline's epoch
/// (the start of a run, or of a simulation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(Duration);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(Duration::ZERO);

    /// The end of time: the latest point a [`Time`] can hold (about 584 billion years
    /// after the epoch). Arithmetic saturates here instead of overflowing.
    pub const MAX: Time = Time(Duration::MAX);

    /// The point `since_epoch` after the epoch.
    pub const fn from_duration(since_epoch: Duration) -> Self {
        Time(since_epoch)
    }

    /// The point `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Time(Duration::from_millis(millis))
    }

    /// The point `secs` seconds after the epoch, saturating: negative or NaN seconds give
    /// the epoch, and seconds beyond what a `Duration` holds (over about 1.8e19, or
    /// infinite) give [`Time::MAX`]. Never panics, whatever a user typed; to refuse such
    /// input instead, use [`Time::try_from_secs_f64`].
    pub fn from_secs_f64(secs: f64) -> Self {
        if secs.is_nan() || secs <= 0.0 {
            return Time::ZERO;
        }
        Duration::try_from_secs_f64(secs).map_or(Time::MAX, Time)
    }

    /// The point `secs` seconds after the epoch, for input that must make sense: a
    /// finite number of seconds, at least zero, that a `Duration` can hold.
    ///
    /// # Errors
    /// [`TimeRangeError`] for NaN, negative, infinite or too large seconds.
    pub fn try_from_secs_f64(secs: f64) -> Result<Self, TimeRangeError> {
        // `try_from_secs_f64` alone refuses NaN and negatives but also infinity; the
        // explicit checks keep the intent readable.
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if secs.is_finite() && secs >= 0.0 => Ok(Time(d)),
            _ => Err(TimeRangeError { secs }),
        }
    }

    /// Time elapsed since the epoch.
    pub const fn since_epoch(self) -> Duration {
        self.0
    }

    /// Seconds since the epoch.
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

/// Seconds that are not a point on the timeline: NaN, negative, infinite, or beyond
/// what a `Duration` holds.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("{secs} seconds is not a time: expected a finite number of seconds from 0 to 1.8e19")]
pub struct TimeRangeError {
    /// The seconds refused.
    pub secs: f64,
}

/// Saturating at [`Time::MAX`]: a deadline "1e20 seconds from now" is the end of time,
/// not a panic.
impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        Time(self.0.saturating_add(rhs))
    }
}

/// Saturating at [`Time::MAX`], like `+`.
impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, rhs: Duration) {
        self.0 = self.0.saturating_add(rhs);
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    /// Saturating: a later `rhs` gives zero.
    fn sub(self, rhs: Time) -> Duration {
        self.saturating_since(rhs)
    }
}

/// A source of time that can also wait.
pub trait Clock {
    /// The current point on this clock's timeline.
    fn now(&self) -> Time;
    /// Waits until `deadline` (returns at once if it has passed).
    fn sleep_until(&self, deadline: Time);
}

/// When the tick after the one due at `previous` is due, seen at `now`: one `period`
/// later on the same grid, or `now` if that has passed already (a step overran: the
/// next one starts at once, and no burst of catch-up ticks follows).
pub fn next_tick(previous: Time, period: Duration, now: Time) -> Time {
    (previous + period).max(now)
}

/// The real monotonic clock; its epoch is the moment it was created.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    epoch: std::time::Instant,
}

impl SystemClock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        SystemClock {
            epoch: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Time {
        Time(self.epoch.elapsed())
    }

    fn sleep_until(&self, deadline: Time) {
        let left = deadline.saturating_since(self.now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

/// A clock for simulations: `sleep_until` jumps to the deadline at once.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: std::cell::Cell<Time>,
}

impl VirtualClock {
    /// A virtual clock standing at `start`.
    pub fn starting_at(start: Time) -> Self {
        VirtualClock {
            now: std::cell::Cell::new(start),
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Time {
        self.now.get()
    }

    fn sleep_until(&self, deadline: Time) {
        if deadline > self.now.get() {
            self.now.set(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stay_on_their_grid_and_an_overrun_starts_the_next_at_once() {
        let ms = Time::from_millis;
        let period = Duration::from_millis(50);
        assert_eq!(next_tick(ms(100), period, ms(120)), ms(150));
        // A step that ended at 170 ms overran the 150 ms tick: the next starts at once,
        // and the one after is a period later, not back to back.
        let next = next_tick(ms(100), period, ms(170));
        assert_eq!(next, ms(170));
        assert_eq!(next_tick(next, period, ms(171)), ms(220));
    }

    #[test]
    fn subtracting_a_later_time_saturates_at_zero() {
        let a = Time::from_millis(5);
        let b = Time::from_millis(9);
        assert_eq!(b - a, Duration::from_millis(4));
        assert_eq!(a - b, Duration::ZERO);
    }

    #[test]
    fn nonsense_seconds_map_to_the_epoch() {
        assert_eq!(Time::from_secs_f64(f64::NAN), Time::ZERO);
        assert_eq!(Time::from_secs_f64(-3.0), Time::ZERO);
        assert_eq!(Time::from_secs_f64(1.5), Time::from_millis(1500));
    }

    #[test]
    fn huge_seconds_saturate_instead_of_panicking() {
        for secs in [1e20, f64::MAX, f64::INFINITY, 2f64.powi(64)] {
            assert_eq!(Time::from_secs_f64(secs), Time::MAX, "{secs}");
        }
        // Just below the largest Duration still converts exactly enough.
        assert_eq!(Time::from_secs_f64(1e12).as_secs_f64(), 1e12);
    }

    #[test]
    fn try_from_secs_f64_rejects_what_from_secs_f64_would_clamp() {
        assert_eq!(Time::try_from_secs_f64(2.5), Ok(Time::from_millis(2500)));
        assert_eq!(Time::try_from_secs_f64(0.0), Ok(Time::ZERO));
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e20] {
            let e = Time::try_from_secs_f64(bad).unwrap_err();
            assert!(e.to_string().contains("seconds"), "{e}");
        }
    }

    #[test]
    fn adding_to_the_end_of_time_saturates() {
        let mut t = Time::MAX;
        assert_eq!(t + Duration::from_secs(1), Time::MAX);
        t += Duration::MAX;
        assert_eq!(t, Time::MAX);
        assert_eq!(Time::MAX - Time::ZERO, Duration::MAX);
    }

    #[test]
    fn virtual_clock_jumps_forward_but_never_back() {
        let clock = VirtualClock::default();
        clock.sleep_until(Time::from_millis(30));
        assert_eq!(clock.now(), Time::from_millis(30));
        clock.sleep_until(Time::from_millis(10));
        assert_eq!(clock.now(), Time::from_millis(30));
    }

    #[test]
    fn system_clock_sleeps_at_least_until_the_deadline() {
        let clock = SystemClock::new();
        let deadline = clock.now() + Duration::from_millis(3);
        clock.sleep_until(deadline);
        assert!(clock.now() >= deadline);
    }
}
