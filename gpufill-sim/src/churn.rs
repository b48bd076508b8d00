//! Random foreign arrivals for long and churning simulations, from a seeded generator
//! (no dependency: SplitMix64), so every run is reproducible from its seed.

use std::time::Duration;

use super::job::ForeignJob;
use super::rng::Rng;
use gpufill_core::time::Time;

/// The most random foreign jobs an hour a simulation takes: one a second on average.
/// The simulated GPU's work per virtual second grows with the jobs listed at once
/// (with `gpufill simulate`'s 10 s to 10 min lifetimes, about 300 at this rate, far
/// more than share a real GPU), so a higher rate would only make a run take hours.
pub const MAX_RANDOM_JOBS_PER_HOUR: f64 = 3600.0;

/// A rate of random foreign jobs a user asked for, if it can be simulated: finite,
/// from 0 to [`MAX_RANDOM_JOBS_PER_HOUR`]. For the flag parser, before [`Arrivals::new`]
/// (which clamps instead).
///
/// # Errors
/// [`RateError`] naming the rate and the limit.
pub fn check_random_jobs_per_hour(rate_per_hour: f64) -> Result<f64, RateError> {
    if (0.0..=MAX_RANDOM_JOBS_PER_HOUR).contains(&rate_per_hour) {
        Ok(rate_per_hour)
    } else {
        Err(RateError { rate_per_hour })
    }
}

/// A rate of random foreign jobs outside `0..=MAX_RANDOM_JOBS_PER_HOUR`.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error(
    "{rate_per_hour} random jobs per hour cannot be simulated: expected 0 to {MAX_RANDOM_JOBS_PER_HOUR}"
)]
pub struct RateError {
    /// The rate refused.
    pub rate_per_hour: f64,
}

/// A Poisson stream of foreign jobs: `rate_per_hour` arrivals an hour on average, each
/// staying a uniform time in `lifetime` and wanting a uniform share of the GPU in `load`.
#[derive(Clone, Debug)]
pub struct Arrivals {
    rng: Rng,
    mean_gap_s: f64,
    lifetime_s: (f64, f64),
    load: (f64, f64),
    next_at: f64,
    next_pid: u32,
}

impl Arrivals {
    /// Arrivals from `start` on. A rate of zero (or below, or NaN) gives no arrivals; a
    /// rate above [`MAX_RANDOM_JOBS_PER_HOUR`] is clamped to it.
    pub fn new(seed: u64, rate_per_hour: f64, lifetime: (Duration, Duration), start: Time) -> Self {
        let mean_gap_s = if rate_per_hour > 0.0 {
            3600.0 / rate_per_hour.min(MAX_RANDOM_JOBS_PER_HOUR)
        } else {
            f64::INFINITY
        };
        let mut rng = Rng::new(seed);
        let first = start.as_secs_f64() + rng.exponential(mean_gap_s);
        Arrivals {
            rng,
            mean_gap_s,
            lifetime_s: (lifetime.0.as_secs_f64(), lifetime.1.as_secs_f64()),
            load: (0.2, 1.0),
            next_at: first,
            next_pid: 100_000,
        }
    }

    /// Sets the range of the share of time each job wants the GPU.
    pub fn with_load(mut self, lo: f64, hi: f64) -> Self {
        self.load = (lo.clamp(0.0, 1.0), hi.clamp(0.0, 1.0));
        self
    }

    /// When the next job arrives (infinite for a zero rate).
    pub fn next_at(&self) -> f64 {
        self.next_at
    }

    /// The next job if it is listed before `until`.
    pub fn next_before(&mut self, until: Time) -> Option<ForeignJob> {
        if self.next_at >= until.as_secs_f64() {
            return None;
        }
        let start = self.next_at;
        let life = self.rng.uniform(self.lifetime_s.0, self.lifetime_s.1);
        let load = self.rng.uniform(self.load.0, self.load.1);
        let first_kernel_ms = self.rng.uniform(30.0, 150.0);
        self.next_at += self.rng.exponential(self.mean_gap_s);
        let pid = self.next_pid;
        self.next_pid = self.next_pid.wrapping_add(1).max(100_000);
        Some(ForeignJob {
            pid,
            first_kernel_after: Duration::from_secs_f64(first_kernel_ms / 1e3)
                .min(Time::from_secs_f64(life).since_epoch()),
            ..ForeignJob::compute_bound(start, start + life.max(1e-3), load)
        })
    }
}

/// Per-period figures of a long run, in bounded memory (one entry per period).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Period {
    /// Ticks in the period.
    pub ticks: u64,
    /// Utilization samples taken while filling steadily (see [`LongRunStats::new`]).
    pub samples: u64,
    /// Their mean absolute error against the target, percentage points (NaN if none).
    pub mean_abs_error: f64,
    /// Events the loop reported (each is one log line at info or warn).
    pub events: u64,
    /// Ticks that found a foreign process.
    pub yielding_ticks: u64,
}

/// Accumulates [`Period`]s from ticks: tracking error, events and yielding per period.
#[derive(Clone, Debug)]
pub struct LongRunStats {
    period: Duration,
    settle: Duration,
    filling_since: Option<Time>,
    abs_error_sum: f64,
    periods: Vec<Period>,
}

impl LongRunStats {
    /// Periods of `period`; a sample counts for tracking once the loop has filled
    /// without a break for `settle` (after a yield the controller needs a moment).
    pub fn new(period: Duration, settle: Duration) -> Self {
        LongRunStats {
            period: period.max(Duration::from_millis(1)),
            settle,
            filling_since: None,
            abs_error_sum: 0.0,
            periods: Vec::new(),
        }
    }

    /// Takes one tick into account.
    pub fn record(&mut self, tick: &gpufill_core::fill::Tick) {
        let index = (tick.at.since_epoch().as_nanos() / self.period.as_nanos()) as usize;
        if index >= self.periods.len() {
            self.finish_last();
            self.periods.resize(index + 1, Period::default());
        }
        let filling = tick.state.fills();
        let since = if filling {
            Some(*self.filling_since.get_or_insert(tick.at))
        } else {
            self.filling_since = None;
            None
        };
        let p = &mut self.periods[index];
        p.ticks += 1;
        p.events += tick.events.len() as u64;
        p.yielding_ticks += u64::from(tick.foreign > 0);
        if let (Some(sample), Some(since)) = (tick.sample, since)
            && tick.at.saturating_since(since) >= self.settle
        {
            p.samples += 1;
            self.abs_error_sum += (sample.percent() - tick.target.percent()).abs();
        }
    }

    fn finish_last(&mut self) {
        if let Some(p) = self.periods.last_mut() {
            p.mean_abs_error = self.abs_error_sum / p.samples as f64;
        }
        self.abs_error_sum = 0.0;
    }

    /// The periods so far (the last one complete up to the last tick).
    pub fn periods(&mut self) -> &[Period] {
        if let Some(p) = self.periods.last_mut() {
            p.mean_abs_error = self.abs_error_sum / p.samples as f64;
        }
        &self.periods
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_seeds_give_equal_streams_and_the_rate_is_kept() {
        let life = (Duration::from_secs(1), Duration::from_secs(2));
        let take = |seed| {
            let mut a = Arrivals::new(seed, 3600.0, life, Time::ZERO);
            std::iter::from_fn(|| a.next_before(Time::from_secs_f64(10_000.0)))
                .map(|j| (j.pid, j.listed_at, j.leaves_at))
                .collect::<Vec<_>>()
        };
        let (a, b) = (take(7), take(7));
        assert_eq!(a, b);
        assert_ne!(a, take(8));
        // About one a second over 10 000 s: within 5 %.
        assert!((a.len() as f64 - 10_000.0).abs() < 500.0, "{}", a.len());
        assert!(
            a.iter()
                .all(|&(_, s, e)| e > s && e - s <= Duration::from_secs(2))
        );
    }

    #[test]
    fn a_zero_rate_gives_no_arrivals() {
        let mut a = Arrivals::new(1, 0.0, (Duration::ZERO, Duration::ZERO), Time::ZERO);
        assert!(a.next_before(Time::from_secs_f64(1e9)).is_none());
    }

    #[test]
    fn rates_beyond_the_limit_are_refused_by_the_check_and_clamped_by_arrivals() {
        for ok in [0.0, 20.0, MAX_RANDOM_JOBS_PER_HOUR] {
            assert_eq!(check_random_jobs_per_hour(ok), Ok(ok));
        }
        for bad in [
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e6,
            MAX_RANDOM_JOBS_PER_HOUR * 1.01,
        ] {
            let e = check_random_jobs_per_hour(bad).unwrap_err();
            assert!(e.to_string().contains("per hour"), "{e}");
        }
        let life = (Duration::from_secs(1), Duration::from_secs(2));
        let mut a = Arrivals::new(9, 1e6, life, Time::ZERO);
        let hour = Time::from_secs_f64(3600.0);
        let n = std::iter::from_fn(|| a.next_before(hour)).count() as f64;
        assert!((n - MAX_RANDOM_JOBS_PER_HOUR).abs() < 0.1 * n, "{n}");
    }

    #[test]
    fn endless_lifetimes_saturate_instead_of_panicking() {
        let forever = (Duration::MAX, Duration::MAX);
        let mut a = Arrivals::new(3, 3600.0, forever, Time::ZERO);
        let job = a.next_before(Time::MAX).unwrap();
        assert_eq!(job.leaves_at, Time::MAX);
        assert!(job.first_kernel_after <= Duration::from_millis(150));
    }

    #[test]
    fn uniform_values_stay_in_range() {
        let mut r = Rng::new(42);
        for _ in 0..10_000 {
            let v = r.uniform(2.0, 3.0);
            assert!((2.0..3.0).contains(&v));
        }
    }
}
