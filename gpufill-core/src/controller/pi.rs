//! A proportional-integral controller with feed-forward, in per-sample form.
//!
//! Duty cycle is an almost exact actuator for NVML utilization (it reads a little below
//! the duty: docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes), so
//! the feed-forward `duty = target` lands within a few points at once and the integral
//! removes the steady shortfall (launch overhead, sleep overshoot). The gains are per
//! *sample* rather than per second: each NVML sample is one full averaging window
//! whatever its length (1/6 s to 1 s by product), so the same gains are stable on every
//! product.
//!
//! The controller is fed only new samples. NVML's samples lag the duty: the first
//! sample after a change of target still showed the old duty and the second a mix, so
//! integrating their errors overshot and settled slowly
//! (docs/benchmarks-history.md#results-on-the-h200-session-of-2026-11-21-driver-58015904).
//! After a change of
//! target the controller therefore holds its integral and proportional terms for the
//! next [`PiGains::stale_samples`] samples (2): the feed-forward moves the duty at once,
//! and only samples that can show the new duty correct it.

use super::Controller;
use crate::time::Time;
use crate::units::{Duty, Utilization};

/// A change of target smaller than this (a fraction: half a point) is not a step.
const STEP: f64 = 0.005;

/// Gains of [`PiController`], per sample; defaults tuned on the simulated GPU
/// (benches/controller.rs) for 200 ms sampling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PiGains {
    /// Duty per unit of target applied before any measurement.
    pub feed_forward: f64,
    /// Duty per unit of the latest error.
    pub kp: f64,
    /// Duty added to the integral per unit of error, per sample.
    pub ki: f64,
    /// Samples after a change of target whose error is not acted on: they were (partly)
    /// measured before the new duty took effect.
    pub stale_samples: u8,
}

impl Default for PiGains {
    fn default() -> Self {
        PiGains {
            feed_forward: 1.0,
            kp: 0.1,
            ki: 0.5,
            stale_samples: 2,
        }
    }
}

/// PI controller with feed-forward and anti-windup (the integral is clamped so the
/// feed-forward plus integral stays within `[0, 1]`).
#[derive(Clone, Debug, Default)]
pub struct PiController {
    gains: PiGains,
    integral: f64,
    last_error: f64,
    /// The target of the previous update, to see steps.
    last_target: Option<f64>,
    /// Samples still to be ignored after the last step of target.
    stale: u8,
}

impl PiController {
    /// A controller with the given gains.
    pub fn new(gains: PiGains) -> Self {
        PiController {
            gains,
            integral: 0.0,
            last_error: 0.0,
            last_target: None,
            stale: 0,
        }
    }

    /// The integral term: what the controller has learned about the device's offset.
    pub fn integral(&self) -> f64 {
        self.integral
    }
}

impl Controller for PiController {
    fn update(&mut self, _now: Time, measured: Option<Utilization>, target: Utilization) -> Duty {
        if target.fraction() == 0.0 {
            return Duty::ZERO;
        }
        let base = self.gains.feed_forward * target.fraction();
        let stepped = self
            .last_target
            .is_some_and(|last| (last - target.fraction()).abs() > STEP);
        self.last_target = Some(target.fraction());
        if stepped {
            self.stale = self.gains.stale_samples;
            self.last_error = 0.0;
        }
        if measured.is_some() && self.stale > 0 {
            self.stale -= 1;
        } else if let Some(m) = measured {
            let error = target.fraction() - m.fraction();
            self.last_error = error;
            if error.is_finite() {
                self.integral = (self.integral + self.gains.ki * error).clamp(-base, 1.0 - base);
            }
        }
        Duty::clamped(base + self.integral + self.gains.kp * self.last_error)
    }

    fn reset(&mut self, _now: Time) {
        // The integral is the device's steady offset: keep it, it is as right after a pause.
        // Resuming is a step of duty from zero: the next samples still show the idle time
        // (`gpufill bench` after its yield test overshot when they were integrated: run 4
        // in docs/benchmarks-history.md#results-on-the-h200-session-of-2026-11-21-driver-58015904),
        // so they are held like those after a step of target.
        self.last_error = 0.0;
        self.stale = self.gains.stale_samples;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p: f64) -> Utilization {
        Utilization::from_percent(p).unwrap()
    }

    #[test]
    fn starts_from_feed_forward_before_any_sample() {
        let mut pi = PiController::default();
        assert_eq!(pi.update(Time::ZERO, None, pct(50.0)).fraction(), 0.5);
    }

    #[test]
    fn integral_removes_a_steady_shortfall() {
        // A plant that delivers 96 % of the commanded duty, as NVML showed for 1 ms kernels
        // (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes).
        let mut pi = PiController::default();
        let mut duty = pi.update(Time::ZERO, None, pct(50.0));
        for _ in 0..20 {
            let measured = Utilization::saturating_from_fraction(0.96 * duty.fraction());
            duty = pi.update(Time::ZERO, Some(measured), pct(50.0));
        }
        assert!((0.96 * duty.fraction() - 0.5).abs() < 0.002, "{duty}");
    }

    #[test]
    fn integral_does_not_wind_up_at_saturation() {
        // A plant stuck at 0 % (say, throttled) for a long time must not leave a huge integral.
        let mut pi = PiController::default();
        for _ in 0..1000 {
            pi.update(Time::ZERO, Some(Utilization::ZERO), pct(60.0));
        }
        assert!(pi.integral() <= 0.4 + 1e-9);
        // Once the plant responds, the duty comes back below 100 % within one sample.
        let d = pi.update(Time::ZERO, Some(pct(100.0)), pct(60.0));
        assert!(d.fraction() < 1.0, "{d}");
    }

    #[test]
    fn zero_target_gives_zero_duty() {
        let mut pi = PiController::default();
        pi.update(Time::ZERO, Some(pct(10.0)), pct(50.0));
        assert!(pi.update(Time::ZERO, None, pct(0.0)).is_zero());
    }

    #[test]
    fn target_change_acts_without_waiting_for_a_sample() {
        let mut pi = PiController::default();
        pi.update(Time::ZERO, None, pct(10.0));
        let d = pi.update(Time::ZERO, None, pct(90.0));
        assert!((d.fraction() - 0.9).abs() < 1e-9);
    }

    /// A plant whose samples lag the duty by two samples (the first after a change still
    /// shows the old duty, the second the new), with a steady 4 % shortfall. Returns how
    /// far the duty went past its final value in the direction of the step, and after
    /// how many samples it stayed within 2 points.
    fn lagged_step(gains: PiGains, from: f64, to: f64) -> (f64, usize) {
        let mut pi = PiController::new(gains);
        let mut duties = vec![pi.update(Time::ZERO, None, pct(from)).fraction(); 2];
        let mut run = |duties: &mut Vec<f64>, target: f64| {
            for _ in 0..40 {
                let seen = Utilization::saturating_from_fraction(0.96 * duties[duties.len() - 2]);
                duties.push(pi.update(Time::ZERO, Some(seen), pct(target)).fraction());
            }
        };
        run(&mut duties, from);
        let before = duties.len();
        run(&mut duties, to);
        let after = &duties[before..];
        let goal = to / 100.0 / 0.96;
        let past = if to > from {
            after.iter().map(|d| d - goal).fold(0.0, f64::max)
        } else {
            after.iter().map(|d| goal - d).fold(0.0, f64::max)
        };
        let settled = after
            .iter()
            .rposition(|d| (0.96 * d - to / 100.0).abs() > 0.02)
            .map_or(0, |i| i + 1);
        (past, settled)
    }

    #[test]
    fn a_step_of_target_does_not_integrate_the_samples_that_predate_it() {
        for (from, to) in [(10.0, 25.0), (25.0, 50.0), (50.0, 75.0), (90.0, 10.0)] {
            let (past, settled) = lagged_step(PiGains::default(), from, to);
            assert!(past < 0.01, "{from}->{to}: {past} past the final duty");
            assert!(
                settled <= 3,
                "{from}->{to}: settled after {settled} samples"
            );
        }
    }

    #[test]
    fn after_a_reset_the_samples_that_still_show_the_pause_are_not_integrated() {
        let mut pi = PiController::default();
        for _ in 0..20 {
            pi.update(Time::ZERO, Some(pct(88.0)), pct(90.0));
        }
        let learned = pi.integral();
        pi.reset(Time::ZERO);
        // A sample with the pause in it (say 40 %) right after resuming changes nothing.
        let d = pi.update(Time::ZERO, Some(pct(40.0)), pct(90.0));
        assert_eq!(pi.integral(), learned);
        assert!((d.fraction() - (0.9 + learned)).abs() < 1e-12, "{d}");
    }

    #[test]
    fn without_the_hold_the_same_steps_overshoot() {
        let eager = PiGains {
            stale_samples: 0,
            ..PiGains::default()
        };
        for (from, to) in [(10.0, 25.0), (25.0, 50.0), (50.0, 75.0)] {
            let (past, _) = lagged_step(eager, from, to);
            assert!(past > 0.03, "{from}->{to}: only {past} past the final duty");
        }
    }
}
