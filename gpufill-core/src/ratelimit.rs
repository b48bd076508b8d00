//! [`RateLimiter`]: log the first of a run of repeated warnings, then at most one
//! summary line per interval with how many were held back.
//!
//! A flapping NVML call or a load that keeps failing would otherwise log on every tick
//! (100 lines a second). Like the rest of the core it takes the time as an argument,
//! so it is tested on a virtual clock.

use std::time::Duration;

use crate::time::Time;

/// Counts occurrences of one kind of warning and says which to log.
///
/// Call [`RateLimiter::hit`] for each occurrence and log it when it returns true;
/// call [`RateLimiter::summary`] every tick and log the count it returns, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimiter {
    interval: Duration,
    window_start: Option<Time>,
    held_back: u64,
}

impl RateLimiter {
    /// At most one line per `interval` after the first.
    pub fn new(interval: Duration) -> Self {
        RateLimiter {
            interval,
            window_start: None,
            held_back: 0,
        }
    }

    /// One minute: the default for warnings that may repeat every tick.
    pub fn per_minute() -> Self {
        Self::new(Duration::from_secs(60))
    }

    /// Records an occurrence at `now`; true when it should be logged in full (the first
    /// one, or the first after a quiet interval), false when it is only counted.
    pub fn hit(&mut self, now: Time) -> bool {
        let open = self
            .window_start
            .is_some_and(|start| now.saturating_since(start) < self.interval || self.held_back > 0);
        if open {
            self.held_back += 1;
            return false;
        }
        self.window_start = Some(now);
        true
    }

    /// The number of occurrences held back, once the interval since the first of them
    /// has passed; the next interval starts now. `None` when there is nothing to report
    /// yet. Call it every tick.
    pub fn summary(&mut self, now: Time) -> Option<u64> {
        let start = self.window_start?;
        if now.saturating_since(start) < self.interval {
            return None;
        }
        if self.held_back == 0 {
            // A quiet interval: the next occurrence is logged in full again.
            self.window_start = None;
            return None;
        }
        self.window_start = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }

    /// Occurrences counted but not yet reported.
    pub fn held_back(&self) -> u64 {
        self.held_back
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{Clock, VirtualClock};

    const TICK: Duration = Duration::from_millis(10);

    /// Ticks from the clock's time until `until_s`, with an occurrence on every tick
    /// for which `fails` is true; returns (full lines, summaries).
    fn drive(
        limiter: &mut RateLimiter,
        clock: &VirtualClock,
        until_s: f64,
        fails: impl Fn(Time) -> bool,
    ) -> (Vec<Time>, Vec<(Time, u64)>) {
        let (mut full, mut summaries) = (Vec::new(), Vec::new());
        while clock.now() < Time::from_secs_f64(until_s) {
            let now = clock.now();
            if let Some(n) = limiter.summary(now) {
                summaries.push((now, n));
            }
            if fails(now) && limiter.hit(now) {
                full.push(now);
            }
            clock.sleep_until(now + TICK);
        }
        (full, summaries)
    }

    #[test]
    fn a_fault_on_every_tick_logs_once_then_one_summary_a_minute() {
        let clock = VirtualClock::default();
        let mut limiter = RateLimiter::per_minute();
        let (full, summaries) = drive(&mut limiter, &clock, 185.0, |_| true);
        assert_eq!(full, [Time::ZERO]);
        let at: Vec<u64> = summaries
            .iter()
            .map(|(t, _)| t.as_secs_f64().round() as u64)
            .collect();
        assert_eq!(at, [60, 120, 180]);
        // Every occurrence is accounted for: logged, summarised or still held back.
        let summarised: u64 = summaries.iter().map(|(_, n)| n).sum();
        assert_eq!(1 + summarised + limiter.held_back(), 18_500);
    }

    #[test]
    fn a_single_fault_is_logged_and_never_summarised() {
        let clock = VirtualClock::default();
        let mut limiter = RateLimiter::per_minute();
        let once = Time::from_secs_f64(5.0);
        let (full, summaries) = drive(&mut limiter, &clock, 200.0, |t| t == once);
        assert_eq!(full, [once]);
        assert!(summaries.is_empty());
    }

    #[test]
    fn faults_an_interval_apart_are_each_logged_in_full() {
        let clock = VirtualClock::default();
        let mut limiter = RateLimiter::per_minute();
        let times = [Time::from_secs_f64(1.0), Time::from_secs_f64(100.0)];
        let (full, summaries) = drive(&mut limiter, &clock, 200.0, |t| times.contains(&t));
        assert_eq!(full, times);
        assert!(summaries.is_empty());
    }

    #[test]
    fn a_burst_is_summarised_once_the_minute_is_over() {
        let clock = VirtualClock::default();
        let mut limiter = RateLimiter::per_minute();
        // 5 s of faults on every tick, starting at 10 s.
        let burst = |t: Time| (10.0..15.0).contains(&t.as_secs_f64());
        let (full, summaries) = drive(&mut limiter, &clock, 300.0, burst);
        assert_eq!(full.len(), 1);
        assert_eq!(summaries.len(), 1);
        let (at, n) = summaries[0];
        assert!((at.as_secs_f64() - 70.0).abs() < 0.02, "{at:?}");
        assert_eq!(n, 499);
    }
}
