//! The launcher's arithmetic, kept pure so CI tests it without a GPU: how a duty turns
//! into a burst of kernels, and where the next period starts.

use std::time::Duration;

use gpufill_core::Time;

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

/// The burst for `duty` of a `period`, in kernels no longer than `max_kernel`, and no
/// longer than `room` (what is left of the period, so a late burst never spills into
/// the next one). `None` when the burst would be shorter than [`MIN_BURST`].
///
/// The on-time is split evenly into `ceil(on / max_kernel)` kernels, so every kernel is
/// as long as possible: fewer launches for the same on-time.
pub fn plan_burst(
    duty: f64,
    period: Duration,
    max_kernel: Duration,
    room: Duration,
) -> Option<Burst> {
    let duty = if duty.is_nan() {
        0.0
    } else {
        duty.clamp(0.0, 1.0)
    };
    let on = period.mul_f64(duty).min(room);
    if on < MIN_BURST || max_kernel.is_zero() {
        return None;
    }
    let on_ns = on.as_nanos();
    let count = on_ns.div_ceil(max_kernel.as_nanos());
    let count = u32::try_from(count).ok()?;
    let kernel_ns = u64::try_from(on_ns / u128::from(count)).ok()?;
    Some(Burst {
        count,
        kernel: Duration::from_nanos(kernel_ns),
    })
}

/// Where the period after the one that started at `start` begins, seen at `now`, and
/// how many whole periods were missed on the way.
///
/// Periods sit on a fixed grid `start + k * period`, so oversleeping delays one burst
/// but never shifts the ones after it. If `now` is already past the end of the next
/// period, the periods in between are missed and the grid point at or before `now` is
/// returned, which the caller starts at once.
pub fn next_period(start: Time, period: Duration, now: Time) -> (Time, u64) {
    let next = start + period;
    if period.is_zero() || now < next + period {
        return (next, 0);
    }
    let behind = (now - next).as_nanos() / period.as_nanos();
    let missed = u64::try_from(behind).unwrap_or(u64::MAX);
    (
        next + period * u32::try_from(missed).unwrap_or(u32::MAX),
        missed,
    )
}

/// How long to sleep before polling a late burst again: starts at `first`, doubles,
/// and never goes past `cap`. A burst that is only a little late (its last kernel ends
/// microseconds after the period starts, as at full duty) is caught at once; one that
/// is slowed by another process costs a few wake-ups, not hundreds.
pub fn backoff(first: Duration, cap: Duration, attempt: u32) -> Duration {
    first.saturating_mul(1u32 << attempt.min(16)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn burst(duty: f64) -> Option<Burst> {
        plan_burst(duty, 20 * MS, 2 * MS, 20 * MS)
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
    fn a_late_burst_is_cut_to_the_room_left_in_its_period() {
        let b = plan_burst(0.9, 20 * MS, 2 * MS, 7 * MS).unwrap();
        assert_eq!(b.on_time(), 7 * MS);
        assert_eq!(b.count, 4);
        assert_eq!(
            plan_burst(0.9, 20 * MS, 2 * MS, Duration::from_micros(3)),
            None
        );
    }

    #[test]
    fn duty_beyond_one_is_clamped() {
        assert_eq!(burst(3.0), burst(1.0));
    }

    #[test]
    fn periods_stay_on_their_grid_when_the_thread_wakes_late() {
        let start = Time::from_millis(100);
        // Woke 3 ms late into the next period: still that period, no drift.
        assert_eq!(
            next_period(start, 20 * MS, Time::from_millis(123)),
            (Time::from_millis(120), 0)
        );
        // Early: the next grid point.
        assert_eq!(
            next_period(start, 20 * MS, Time::from_millis(105)),
            (Time::from_millis(120), 0)
        );
    }

    #[test]
    fn whole_periods_slept_through_are_counted_as_missed() {
        let start = Time::from_millis(100);
        assert_eq!(
            next_period(start, 20 * MS, Time::from_millis(140)),
            (Time::from_millis(140), 1)
        );
        assert_eq!(
            next_period(start, 20 * MS, Time::from_millis(175)),
            (Time::from_millis(160), 2)
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
}
