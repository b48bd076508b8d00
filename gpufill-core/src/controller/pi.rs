//! A proportional-integral controller with feed-forward, in per-sample form.
//!
//! Duty cycle is an almost exact actuator for NVML utilization (gpu-facts.md: 1 ms
//! kernels at 50/25/75 % duty read 48/24/73 %), so the feed-forward `duty = target`
//! lands within a few points at once and the integral removes the steady shortfall
//! (launch overhead, sleep overshoot). The gains are per *sample* rather than per
//! second: each NVML sample is one full averaging window whatever its length (1/6 s
//! to 1 s by product), so the same gains are stable on every product.
//!
//! The controller is fed only new samples, and the first one after a duty change is
//! a mix of old and new duty; the modest integral gain keeps that from overshooting.

use super::Controller;
use crate::time::Time;
use crate::units::{Duty, Utilization};

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
}

impl Default for PiGains {
    fn default() -> Self {
        PiGains {
            feed_forward: 1.0,
            kp: 0.1,
            ki: 0.5,
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
}

impl PiController {
    /// A controller with the given gains.
    pub fn new(gains: PiGains) -> Self {
        PiController {
            gains,
            integral: 0.0,
            last_error: 0.0,
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
        if let Some(m) = measured {
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
        self.last_error = 0.0;
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
        // A plant that delivers 96 % of the commanded duty, as NVML showed for 1 ms kernels.
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
}
