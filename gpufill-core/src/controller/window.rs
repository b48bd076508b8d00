//! The original Python tool's rule, for comparison: one decision per 10 s window.
//!
//! At the end of each window: multiply the load by 1.2 when the window's mean is below
//! 90 % of the target, divide it by 1.5 when above 120 %, and idle for 5 s when the
//! window's peak exceeds 110 % of the target. It starts at a low load, so it takes over
//! a minute to reach 50 % (on the simulated GPU:
//! docs/benchmarks.md#controller-tuning-on-the-simulated-gpu-cargo-bench--p-gpufill-bench---bench-controller).

use std::time::Duration;

use super::Controller;
use crate::time::Time;
use crate::units::{Duty, Utilization};

/// Settings of [`WindowRule`]; the defaults are the original tool's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowRuleSettings {
    /// Length of one decision window.
    pub window: Duration,
    /// Load factor when the mean is below `low_ratio` x target.
    pub up: f64,
    /// Load divisor when the mean is above `high_ratio` x target.
    pub down: f64,
    /// Below this share of the target the load goes up.
    pub low_ratio: f64,
    /// Above this share of the target the load goes down.
    pub high_ratio: f64,
    /// A peak above this share of the target makes it idle for `backoff`.
    pub peak_ratio: f64,
    /// How long it idles after a peak.
    pub backoff: Duration,
    /// The load it starts with.
    pub start: f64,
}

impl Default for WindowRuleSettings {
    fn default() -> Self {
        WindowRuleSettings {
            window: Duration::from_secs(10),
            up: 1.2,
            down: 1.5,
            low_ratio: 0.9,
            high_ratio: 1.2,
            peak_ratio: 1.1,
            backoff: Duration::from_secs(5),
            start: 0.1,
        }
    }
}

/// The windowed multiplicative rule of the original tool.
#[derive(Clone, Debug, Default)]
pub struct WindowRule {
    settings: WindowRuleSettings,
    load: Option<f64>,
    window_start: Option<Time>,
    idle_until: Option<Time>,
    sum: f64,
    count: u32,
    peak: f64,
}

impl WindowRule {
    /// A rule with the given settings.
    pub fn new(settings: WindowRuleSettings) -> Self {
        WindowRule {
            settings,
            ..WindowRule::default()
        }
    }

    fn start_window(&mut self, now: Time) {
        self.window_start = Some(now);
        self.sum = 0.0;
        self.count = 0;
        self.peak = 0.0;
    }

    fn decide(&mut self, now: Time, target: f64) {
        let s = self.settings;
        let load = self.load.unwrap_or(s.start);
        let mean = self.sum / f64::from(self.count);
        let next = if self.peak > s.peak_ratio * target {
            self.idle_until = Some(now + s.backoff);
            load
        } else if mean < s.low_ratio * target {
            load * s.up
        } else if mean > s.high_ratio * target {
            load / s.down
        } else {
            load
        };
        // A multiplicative rule never leaves zero, so keep a floor.
        self.load = Some(next.clamp(0.01, 1.0));
        self.start_window(now);
    }
}

impl Controller for WindowRule {
    fn update(&mut self, now: Time, measured: Option<Utilization>, target: Utilization) -> Duty {
        if let Some(until) = self.idle_until {
            if now < until {
                return Duty::ZERO;
            }
            self.idle_until = None;
            self.start_window(now);
        }
        let start = *self.window_start.get_or_insert(now);
        if let Some(m) = measured {
            self.sum += m.fraction();
            self.count += 1;
            self.peak = self.peak.max(m.fraction());
        }
        if now.saturating_since(start) >= self.settings.window && self.count > 0 {
            self.decide(now, target.fraction());
            if self.idle_until.is_some() {
                return Duty::ZERO;
            }
        }
        Duty::clamped(self.load.unwrap_or(self.settings.start))
    }

    fn reset(&mut self, now: Time) {
        self.idle_until = None;
        self.start_window(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p: f64) -> Utilization {
        Utilization::from_percent(p).unwrap()
    }

    /// Feeds one sample every 200 ms of a plant that reads exactly the duty.
    fn run(rule: &mut WindowRule, from_ms: u64, to_ms: u64, target: f64) -> Duty {
        let mut duty = rule.update(Time::from_millis(from_ms), None, pct(target));
        for ms in (from_ms..to_ms).step_by(200) {
            let m = Utilization::saturating_from_fraction(duty.fraction());
            duty = rule.update(Time::from_millis(ms), Some(m), pct(target));
        }
        duty
    }

    #[test]
    fn decides_only_at_the_end_of_a_window() {
        let mut rule = WindowRule::default();
        assert_eq!(run(&mut rule, 0, 9_900, 50.0).fraction(), 0.1);
        let after = run(&mut rule, 10_000, 10_200, 50.0);
        assert!((after.fraction() - 0.12).abs() < 1e-9, "{after}");
    }

    #[test]
    fn backs_off_when_too_high_and_idles_after_a_peak() {
        let mut rule = WindowRule::new(WindowRuleSettings {
            start: 0.9,
            ..WindowRuleSettings::default()
        });
        // Peak 90 % > 110 % of 50: idle for 5 s.
        let d = run(&mut rule, 0, 10_200, 50.0);
        assert!(d.is_zero());
        assert!(
            rule.update(Time::from_millis(14_000), None, pct(50.0))
                .is_zero()
        );
        assert_eq!(
            rule.update(Time::from_millis(15_300), None, pct(50.0))
                .fraction(),
            0.9
        );
    }

    #[test]
    fn lowers_the_load_when_the_mean_is_far_above_target() {
        let mut rule = WindowRule::new(WindowRuleSettings {
            start: 0.8,
            peak_ratio: 10.0,
            ..WindowRuleSettings::default()
        });
        let d = run(&mut rule, 0, 10_200, 50.0);
        assert!((d.fraction() - 0.8 / 1.5).abs() < 1e-9, "{d}");
    }
}
