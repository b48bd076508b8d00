//! The shaper: how a share of the GPU becomes a [`Load`] (a duty and a width).
//!
//! With the default `util` metric the controller's output is the duty itself and the
//! width is fixed ([`Shaping::Fixed`]): NVML's utilization counts time only, so one warp
//! reads like a full grid.
//!
//! With the `sm` metric (GPM's SM utilization, the share of SMs busy) the controller's
//! output is an **SM-time share** `s` in `[0, 1]`, and [`Shaper`] picks the width `w`
//! (one-warp blocks, one per SM, `1..=sm_count`) and the duty `d` with
//! `w x d / sm_count = s` at the least power that [`PowerModel`] predicts. Any such pair
//! reads the same on GPM (within the launch overhead, which the controller's integral
//! absorbs), so the choice between them is purely about cost.
//!
//! **The power model is the place to update from measurement.** Its defaults come from
//! three H200 points at 100 % duty (docs/gpu-facts.md): 1 block x 32 threads 125 W,
//! 132 x 128 166 W (GPM 90.8 %), idle about 80 W; so about 45 W for having any kernel
//! resident and 45 W per 100 % of SMs busy. With exponent 1 that makes "widest, shortest"
//! cheapest; a grid of width x duty x kernel measurements (`scripts/sm_check.py` and the
//! lead's power grid) may show watts growing faster than linearly with width
//! (`sm_exponent > 1`), and then the cheapest width is inside the range. The
//! [`Shaper`]'s hysteresis keeps the width from flapping when the share jitters near a
//! flat optimum.

use crate::units::{Duty, Load, Width};

/// Modelled board power of our kernels, in watts:
/// `idle_w + per_duty_w x d + per_sm_w x d x (w / sm_count)^sm_exponent`.
///
/// `per_duty_w` is the cost of having any kernel resident (clocks up, one SM busy),
/// paid per unit of time share; `per_sm_w` the cost of 100 % of the SMs busy at full
/// duty. With `sm_exponent = 1` the last term is `per_sm_w x s`, the same for every
/// width at a given SM share, so the cheapest shape is the widest (shortest duty).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerModel {
    /// Board power with no kernel of ours (reported, not used in the choice).
    pub idle_w: f64,
    /// Watts per unit of duty (a kernel resident all the time, however narrow).
    pub per_duty_w: f64,
    /// Watts for all SMs busy all the time, on top of `per_duty_w`.
    pub per_sm_w: f64,
    /// How the SM term grows with the width fraction: 1 linear, above 1 faster.
    pub sm_exponent: f64,
}

impl Default for PowerModel {
    /// H200, `spin` kernel: 80 W idle, 125 W at one warp and 100 % duty, 166 W at
    /// 90.8 % of the SMs (gpu-facts.md). To be refitted from the power grid.
    fn default() -> Self {
        PowerModel {
            idle_w: 80.0,
            per_duty_w: 45.0,
            per_sm_w: 45.0,
            sm_exponent: 1.0,
        }
    }
}

impl PowerModel {
    /// The modelled power, watts, of `width` of `sm_count` SMs at `duty`.
    pub fn watts(&self, width: u32, duty: f64, sm_count: u32) -> f64 {
        let fraction = f64::from(width) / f64::from(sm_count.max(1));
        let duty = duty.clamp(0.0, 1.0);
        self.idle_w
            + self.per_duty_w * duty
            + self.per_sm_w * duty * fraction.clamp(0.0, 1.0).powf(self.sm_exponent)
    }
}

/// Settings of the SM shaper.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmShaping {
    /// The device's SM count (from the device, never assumed): the widest kernel.
    pub sm_count: u32,
    /// The cost model the width is chosen by.
    pub model: PowerModel,
    /// A new width is taken only if it saves more than this share of the current
    /// shape's modelled power above idle (or the current width cannot give the share).
    pub hysteresis: f64,
}

impl SmShaping {
    /// Shaping for a device with `sm_count` SMs, default model and 5 % hysteresis.
    pub fn new(sm_count: u32) -> Self {
        SmShaping {
            sm_count: sm_count.max(1),
            model: PowerModel::default(),
            hysteresis: 0.05,
        }
    }
}

/// How the controller's output becomes a load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Shaping {
    /// The output is the duty; the width is `FillSettings::width` (the `util` metric).
    #[default]
    Fixed,
    /// The output is an SM-time share; the width and duty are chosen by power (`sm`).
    Sm(SmShaping),
}

/// Turns the controller's output into a [`Load`]; keeps the width it chose last, for
/// hysteresis.
#[derive(Clone, Debug)]
pub struct Shaper {
    shaping: Shaping,
    width: Option<u32>,
}

impl Shaper {
    /// A shaper with no width chosen yet.
    pub fn new(shaping: Shaping) -> Self {
        Shaper {
            shaping,
            width: None,
        }
    }

    /// The load for controller output `share`, with duty at most `max_duty`; `fixed`
    /// is the width under [`Shaping::Fixed`].
    pub fn shape(&mut self, share: Duty, max_duty: Duty, fixed: Width) -> Load {
        let sm = match self.shaping {
            Shaping::Fixed => {
                return Load {
                    duty: share.min(max_duty),
                    width: fixed,
                };
            }
            Shaping::Sm(sm) => sm,
        };
        let n = sm.sm_count.max(1);
        let s = share.fraction();
        let width = if s == 0.0 {
            self.width.unwrap_or(n)
        } else {
            self.choose(&sm, s, max_duty.fraction())
        };
        self.width = Some(width);
        Load {
            duty: Duty::clamped(s * f64::from(n) / f64::from(width)).min(max_duty),
            width: Width::blocks(width).unwrap_or(Width::ONE_WARP),
        }
    }

    /// The cheapest width for share `s`, keeping the current one unless another saves
    /// more than the hysteresis or the current one cannot reach `s` under `max_duty`.
    fn choose(&self, sm: &SmShaping, s: f64, max_duty: f64) -> u32 {
        let n = sm.sm_count.max(1);
        let duty = |w: u32| s * f64::from(n) / f64::from(w);
        let feasible = |w: u32| duty(w) <= max_duty + 1e-12;
        let cost = |w: u32| sm.model.watts(w, duty(w), n) - sm.model.idle_w;
        let best = (1..=n)
            .filter(|&w| feasible(w))
            .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
            // Out of reach even at full width: the widest gives the most.
            .unwrap_or(n);
        match self.width.filter(|&w| w <= n && feasible(w)) {
            Some(current) if cost(current) <= cost(best) * (1.0 + sm.hysteresis) + 1e-9 => current,
            _ => best,
        }
    }

    /// The width chosen last, if any.
    pub fn width(&self) -> Option<u32> {
        self.width
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaper(model: PowerModel) -> Shaper {
        Shaper::new(Shaping::Sm(SmShaping {
            model,
            ..SmShaping::new(132)
        }))
    }

    fn convex() -> PowerModel {
        PowerModel {
            sm_exponent: 2.0,
            ..PowerModel::default()
        }
    }

    fn share(s: f64) -> Duty {
        Duty::clamped(s)
    }

    #[test]
    fn default_model_reproduces_the_measured_h200_points() {
        let m = PowerModel::default();
        assert!((m.watts(1, 1.0, 132) - 125.0).abs() < 1.0);
        // 132 x 128 read 90.8 % on GPM at 166 W.
        assert!((m.watts(120, 1.0, 132) - 166.0).abs() < 2.0);
        assert_eq!(m.watts(132, 0.0, 132), 80.0);
    }

    #[test]
    fn fixed_shaping_passes_the_duty_through_capped() {
        let mut s = Shaper::new(Shaping::Fixed);
        let w = Width::blocks(4).unwrap();
        let load = s.shape(share(0.7), Duty::clamped(0.5), w);
        assert_eq!(load.duty.fraction(), 0.5);
        assert_eq!(load.width, w);
    }

    #[test]
    fn linear_model_picks_the_widest_and_shortest_shape() {
        let mut s = shaper(PowerModel::default());
        for target in [0.01, 0.1, 0.3, 0.7, 1.0] {
            let load = s.shape(share(target), Duty::FULL, Width::ONE_WARP);
            assert_eq!(load.width.get(), 132, "{target}");
            assert!((load.duty.fraction() - target).abs() < 1e-9, "{target}");
        }
    }

    #[test]
    fn the_shape_gives_the_share_asked_for() {
        let mut s = shaper(convex());
        for target in [0.005, 0.05, 0.2, 0.5, 0.9] {
            let load = s.shape(share(target), Duty::FULL, Width::ONE_WARP);
            let got = f64::from(load.width.get()) * load.duty.fraction() / 132.0;
            assert!((got - target).abs() < 1e-9, "{target}: {load:?}");
            assert!((1..=132).contains(&load.width.get()));
        }
    }

    #[test]
    fn a_convex_model_chooses_a_width_inside_the_range() {
        let model = PowerModel {
            per_sm_w: 200.0,
            ..convex()
        };
        let mut s = shaper(model);
        let load = s.shape(share(0.2), Duty::FULL, Width::ONE_WARP);
        // Minimum of 45 d + 200 s^2 / d: d = s sqrt(200 / 45) = 0.42, w = 0.2 n / 0.42 = 62.
        assert!((55..=70).contains(&load.width.get()), "{load:?}");
        assert!((load.duty.fraction() - 0.42).abs() < 0.05, "{load:?}");
    }

    #[test]
    fn max_duty_forces_a_wider_shape() {
        let model = PowerModel {
            per_sm_w: 200.0,
            ..convex()
        };
        let mut s = shaper(model);
        let load = s.shape(share(0.2), Duty::clamped(0.25), Width::ONE_WARP);
        assert!(load.duty.fraction() <= 0.25 + 1e-9, "{load:?}");
        let got = f64::from(load.width.get()) * load.duty.fraction() / 132.0;
        assert!((got - 0.2).abs() < 1e-9, "{load:?}");
        // Beyond reach: full width at the cap.
        let load = s.shape(share(0.9), Duty::clamped(0.25), Width::ONE_WARP);
        assert_eq!((load.width.get(), load.duty.fraction()), (132, 0.25));
    }

    /// With this model the cheapest width is `n x sqrt(45 / 200)` = 63 whatever the
    /// share, until the share needs more than full duty there: above 0.47 the width is
    /// the narrowest that reaches the share at full duty, which moves with the share.
    fn jittered(hysteresis: f64) -> Vec<u32> {
        let mut s = Shaper::new(Shaping::Sm(SmShaping {
            model: PowerModel {
                per_sm_w: 200.0,
                ..convex()
            },
            hysteresis,
            ..SmShaping::new(132)
        }));
        (0..200)
            .map(|i| {
                let jitter = if i % 2 == 0 { 0.01 } else { -0.01 };
                s.shape(share(0.6 + jitter), Duty::FULL, Width::ONE_WARP)
                    .width
                    .get()
            })
            .collect()
    }

    fn changes(widths: &[u32]) -> usize {
        widths.windows(2).filter(|w| w[0] != w[1]).count()
    }

    #[test]
    fn width_holds_while_the_share_jitters() {
        let widths = jittered(0.05);
        assert!(changes(&widths) <= 1, "{widths:?}");
        // Wide enough for the larger share at full duty.
        assert!(*widths.last().unwrap() >= 81, "{widths:?}");
    }

    #[test]
    fn without_hysteresis_the_same_jitter_flaps() {
        // The control for the test above: it is the hysteresis that holds the width.
        assert!(changes(&jittered(0.0)) > 100);
    }

    #[test]
    fn a_large_change_of_share_still_moves_the_width() {
        let mut s = shaper(PowerModel {
            per_sm_w: 200.0,
            ..convex()
        });
        let low = s.shape(share(0.2), Duty::FULL, Width::ONE_WARP).width;
        let high = s.shape(share(0.9), Duty::FULL, Width::ONE_WARP).width;
        assert!(high > low, "{high:?} vs {low:?}");
    }

    #[test]
    fn zero_share_is_idle_and_keeps_the_width() {
        let mut s = shaper(PowerModel::default());
        s.shape(share(0.5), Duty::FULL, Width::ONE_WARP);
        let load = s.shape(Duty::ZERO, Duty::FULL, Width::ONE_WARP);
        assert!(load.is_idle());
        assert_eq!(s.width(), Some(132));
    }
}
