//! Quantities as newtypes, so the loop never handles a raw percent.
//!
//! Users type percents; the edge converts them once with the checked constructors
//! ([`Utilization::from_percent`]), and everything inside works with fractions.

use std::fmt;
use std::num::NonZeroU32;

/// A value outside the range a quantity allows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what} must be between {min} and {max}, got {got}")]
pub struct RangeError {
    /// The quantity, e.g. "utilization percent".
    pub what: &'static str,
    /// The smallest value allowed.
    pub min: f64,
    /// The largest value allowed.
    pub max: f64,
    /// The value given.
    pub got: f64,
}

fn check(what: &'static str, value: f64, min: f64, max: f64) -> Result<f64, RangeError> {
    // `contains` is false for NaN, so NaN is rejected too.
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(RangeError {
            what,
            min,
            max,
            got: value,
        })
    }
}

/// A share of time during which the GPU is busy, as NVML's `gpu` utilization (or, with
/// the `sm` metric, the share of SMs that are active). Always within `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Utilization(f64);

impl Utilization {
    /// 0 %.
    pub const ZERO: Utilization = Utilization(0.0);
    /// 100 %.
    pub const FULL: Utilization = Utilization(1.0);

    /// A utilization from a percent in `[0, 100]`.
    ///
    /// # Errors
    /// [`RangeError`] when `percent` is outside `[0, 100]` or NaN.
    pub fn from_percent(percent: f64) -> Result<Self, RangeError> {
        check("utilization percent", percent, 0.0, 100.0).map(|p| Utilization(p / 100.0))
    }

    /// A utilization from a fraction, clamped into `[0, 1]` (NaN gives 0): for
    /// readings from a device, which may stray (NVML has reported values above 100).
    pub fn saturating_from_fraction(fraction: f64) -> Self {
        if fraction.is_nan() {
            Utilization::ZERO
        } else {
            Utilization(fraction.clamp(0.0, 1.0))
        }
    }

    /// The fraction, in `[0, 1]`.
    pub fn fraction(self) -> f64 {
        self.0
    }

    /// The percent, in `[0, 100]`.
    pub fn percent(self) -> f64 {
        self.0 * 100.0
    }
}

impl fmt::Display for Utilization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}%", self.percent())
    }
}

/// The share of time our kernels are resident on the GPU. Always within `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Duty(f64);

impl Duty {
    /// No kernel at all.
    pub const ZERO: Duty = Duty(0.0);
    /// Kernels back to back.
    pub const FULL: Duty = Duty(1.0);

    /// A duty from a fraction, clamped into `[0, 1]`; NaN gives 0, so a controller
    /// that computes nonsense idles rather than fills.
    pub fn clamped(fraction: f64) -> Self {
        if fraction.is_nan() {
            Duty::ZERO
        } else {
            Duty(fraction.clamp(0.0, 1.0))
        }
    }

    /// A duty from a percent in `[0, 100]`.
    ///
    /// # Errors
    /// [`RangeError`] when `percent` is outside `[0, 100]` or NaN.
    pub fn from_percent(percent: f64) -> Result<Self, RangeError> {
        check("duty percent", percent, 0.0, 100.0).map(|p| Duty(p / 100.0))
    }

    /// The fraction, in `[0, 1]`.
    pub fn fraction(self) -> f64 {
        self.0
    }

    /// The percent, in `[0, 100]`.
    pub fn percent(self) -> f64 {
        self.0 * 100.0
    }

    /// Whether no kernel is to run.
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }

    /// The smaller of two duties.
    pub fn min(self, other: Duty) -> Duty {
        if other.0 < self.0 { other } else { self }
    }
}

impl fmt::Display for Duty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}%", self.percent())
    }
}

/// How wide each kernel is: the number of one-warp blocks, at most one per SM in
/// practice. Width bounds our share of the SMs; NVML utilization does not see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Width(NonZeroU32);

impl Width {
    /// One block of one warp: the default, which leaves the rest of the chip alone.
    pub const ONE_WARP: Width = Width(NonZeroU32::MIN);

    /// A width of `blocks` blocks, or `None` for zero.
    pub fn blocks(blocks: u32) -> Option<Self> {
        NonZeroU32::new(blocks).map(Width)
    }

    /// The number of blocks.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for Width {
    fn default() -> Self {
        Width::ONE_WARP
    }
}

/// What the launcher is asked to apply: how often and how wide.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// Share of time with a kernel resident.
    pub duty: Duty,
    /// Blocks per kernel.
    pub width: Width,
}

impl Load {
    /// No kernels.
    pub const IDLE: Load = Load {
        duty: Duty::ZERO,
        width: Width::ONE_WARP,
    };

    /// Whether this load launches nothing.
    pub fn is_idle(&self) -> bool {
        self.duty.is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percents_outside_zero_to_hundred_are_rejected() {
        assert!(Utilization::from_percent(-0.1).is_err());
        assert!(Utilization::from_percent(100.1).is_err());
        assert!(Utilization::from_percent(f64::NAN).is_err());
        assert!(Duty::from_percent(101.0).is_err());
        assert_eq!(Utilization::from_percent(50.0).unwrap().fraction(), 0.5);
    }

    #[test]
    fn range_error_says_what_and_what_was_given() {
        let err = Utilization::from_percent(150.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "utilization percent must be between 0 and 100, got 150"
        );
    }

    #[test]
    fn duty_clamps_and_turns_nan_into_idle() {
        assert_eq!(Duty::clamped(1.7), Duty::FULL);
        assert_eq!(Duty::clamped(-0.2), Duty::ZERO);
        assert!(Duty::clamped(f64::NAN).is_zero());
        assert_eq!(Duty::clamped(0.3).min(Duty::clamped(0.2)).fraction(), 0.2);
    }

    #[test]
    fn device_readings_above_hundred_percent_saturate() {
        assert_eq!(
            Utilization::saturating_from_fraction(1.3),
            Utilization::FULL
        );
        assert_eq!(
            Utilization::saturating_from_fraction(f64::NAN),
            Utilization::ZERO
        );
    }

    #[test]
    fn width_refuses_zero_blocks() {
        assert!(Width::blocks(0).is_none());
        assert_eq!(Width::blocks(132).unwrap().get(), 132);
        assert_eq!(Width::default(), Width::ONE_WARP);
    }
}
