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
//! **The power model is the place to update from measurement.** Its constants come from
//! the power grid of width x duty x kernel
//! (docs/benchmarks.md#power-and-gpm-sm-utilization-over-width-x-duty-scriptspower_gridpy;
//! `docs/data/power_grid.txt`): any kernel at all costs
//! a large step over idle whatever its duty (`active_w`); beyond that, one warp per SM
//! costs little per unit of SM time (`per_sm_w`: with `spin_sleep` a fraction of what it
//! is with `spin`), linear in the width. At a given SM share that makes every width cost about the same, the widest a
//! little less (the duty term), so the shaper runs every SM for the shortest time, and
//! breaks ties towards the widest shape: the shortest bursts get out of a newcomer's way
//! soonest. Should a measurement show watts growing faster than linearly with width
//! (`sm_exponent > 1`), the cheapest width moves inside the range; the [`Shaper`]'s
//! hysteresis keeps it from flapping when the share jitters.

use crate::units::{Duty, Load, Width};

/// Modelled board power of our kernels, in watts: `idle_w` with no kernel, else
/// `idle_w + active_w + per_duty_w x d + per_sm_w x d x (w / sm_count)^sm_exponent`.
///
/// `active_w` is the step any kernel costs (the GPU leaves its idle clocks), the same for
/// every shape, so it never decides one; `per_duty_w` is paid per unit of time share
/// however narrow; `per_sm_w` is the cost of every SM busy all the time. With
/// `sm_exponent = 1` the last term is `per_sm_w x s`, the same for every width at a
/// given SM share `s`, so the duty term decides: the widest (shortest) shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerModel {
    /// Board power with no kernel of ours.
    pub idle_w: f64,
    /// The step from idle to any kernel resident.
    pub active_w: f64,
    /// Watts per unit of duty beyond the step (a kernel resident all the time).
    pub per_duty_w: f64,
    /// Watts for all SMs busy all the time (one warp each), beyond the above.
    pub per_sm_w: f64,
    /// How the SM term grows with the width fraction: 1 linear, above 1 faster.
    pub sm_exponent: f64,
}

impl PowerModel {
    /// `spin`, one warp per block: fitted on the `spin` rows of the power grid, measured
    /// on the GPU the name gives
    /// (docs/benchmarks.md#power-and-gpm-sm-utilization-over-width-x-duty-scriptspower_gridpy).
    pub const H200_SPIN: PowerModel = PowerModel {
        idle_w: 78.3,
        active_w: 43.1,
        per_duty_w: 0.5,
        per_sm_w: 11.3,
        sm_exponent: 1.0,
    };

    /// `spin_sleep`, one warp per block: fitted on the `spin_sleep` rows of the
    /// same grid.
    pub const H200_SPIN_SLEEP: PowerModel = PowerModel {
        idle_w: 78.3,
        active_w: 43.0,
        per_duty_w: 0.0,
        per_sm_w: 1.5,
        sm_exponent: 1.0,
    };

    /// The modelled power, watts, of `width` of `sm_count` SMs at `duty`.
    pub fn watts(&self, width: u32, duty: f64, sm_count: u32) -> f64 {
        let duty = duty.clamp(0.0, 1.0);
        if duty == 0.0 {
            return self.idle_w;
        }
        self.idle_w + self.active_w + self.shape_watts(width, duty, sm_count)
    }

    /// The part of [`PowerModel::watts`] that depends on the shape: the terms in duty
    /// and width, without idle and the step.
    pub fn shape_watts(&self, width: u32, duty: f64, sm_count: u32) -> f64 {
        let fraction = (f64::from(width) / f64::from(sm_count.max(1))).clamp(0.0, 1.0);
        let duty = duty.clamp(0.0, 1.0);
        self.per_duty_w * duty + self.per_sm_w * duty * fraction.powf(self.sm_exponent)
    }
}

impl Default for PowerModel {
    /// [`PowerModel::H200_SPIN`].
    fn default() -> Self {
        PowerModel::H200_SPIN
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
    /// shape's modelled [`PowerModel::shape_watts`] (or the current width cannot give
    /// the share).
    pub hysteresis: f64,
}

impl SmShaping {
    /// Shaping for a device with `sm_count` SMs, the default model and 5 % hysteresis.
    pub fn new(sm_count: u32) -> Self {
        Self::with_model(sm_count, PowerModel::default())
    }

    /// Shaping for a device with `sm_count` SMs by `model`, with 5 % hysteresis.
    pub fn with_model(sm_count: u32, model: PowerModel) -> Self {
        SmShaping {
            sm_count: sm_count.max(1),
            model,
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

impl Shaping {
    /// What `load` should read on the metric this shaping holds, as a fraction: the duty
    /// (`util`), or the SM share `width x duty / sm_count` (`sm`). What our own load
    /// explains of a reading ([`crate::unlisted::OwnShare`]).
    pub fn reading(&self, load: Load) -> f64 {
        match self {
            Shaping::Fixed => load.duty.fraction(),
            Shaping::Sm(sm) => {
                let n = sm.sm_count.max(1);
                load.duty.fraction() * f64::from(load.width.get().min(n)) / f64::from(n)
            }
        }
    }
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
        let cost = |w: u32| sm.model.shape_watts(w, duty(w), n);
        let least = (1..=n)
            .filter(|&w| feasible(w))
            .map(cost)
            .min_by(f64::total_cmp);
        let best = match least {
            // Ties (within a milliwatt) go to the widest: the shortest bursts.
            Some(least) => (1..=n)
                .rev()
                .find(|&w| feasible(w) && cost(w) <= least + 1e-3)
                .unwrap_or(n),
            // Out of reach even at full width: the widest gives the most.
            None => n,
        };
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

    /// Watts convex in width, with a duty term as large as the first rough model had.
    fn convex() -> PowerModel {
        PowerModel {
            per_duty_w: 45.0,
            sm_exponent: 2.0,
            ..PowerModel::default()
        }
    }

    fn share(s: f64) -> Duty {
        Duty::clamped(s)
    }

    #[test]
    fn a_load_reads_as_its_duty_or_its_sm_share() {
        let load = Load {
            duty: Duty::clamped(0.5),
            width: Width::blocks(66).unwrap(),
        };
        assert_eq!(Shaping::Fixed.reading(load), 0.5);
        assert_eq!(Shaping::Sm(SmShaping::new(132)).reading(load), 0.25);
        assert_eq!(Shaping::Sm(SmShaping::new(33)).reading(load), 0.5);
    }

    #[test]
    fn the_h200_models_reproduce_the_power_grid_within_two_watts() {
        // (blocks of 32 threads, duty, watts) from docs/data/power_grid.txt.
        let spin = [
            (1, 0.25, 121.5),
            (1, 1.0, 121.9),
            (33, 1.0, 124.7),
            (66, 1.0, 127.6),
            (132, 0.25, 124.6),
            (132, 0.5, 125.4),
            (132, 1.0, 133.2),
        ];
        let sleep = [
            (1, 1.0, 121.3),
            (66, 1.0, 122.0),
            (132, 0.5, 121.7),
            (132, 1.0, 122.8),
        ];
        for (model, points) in [
            (PowerModel::H200_SPIN, &spin[..]),
            (PowerModel::H200_SPIN_SLEEP, &sleep[..]),
        ] {
            for &(w, d, watts) in points {
                let got = model.watts(w, d, 132);
                assert!((got - watts).abs() <= 2.0, "{model:?} {w} x {d}: {got}");
            }
            assert_eq!(model.watts(132, 0.0, 132), 78.3);
        }
    }

    #[test]
    fn spin_sleep_shapes_like_spin_widest_first() {
        let mut s = shaper(PowerModel::H200_SPIN_SLEEP);
        let load = s.shape(share(0.3), Duty::FULL, Width::ONE_WARP);
        assert_eq!(load.width.get(), 132);
        assert!((load.duty.fraction() - 0.3).abs() < 1e-9);
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
