//! Scenarios for the `sm` metric on the simulated GPU: the loop reads SM activity
//! (width x duty / SM count) and the shaper chooses width and duty.

use std::time::Duration;

use gpufill_core::LoopSettings;
use gpufill_core::{
    ControllerKind, FillLoop, FillSettings, PowerModel, Probe, ProcessInfo, Shaping, SmShaping,
    State, Tick, Time, Utilization, YieldPolicy, YieldSettings,
};
use gpufill_sim::{ForeignJob, SimConfig, SimGpu, SimProbe, Simulation, tracking};

const TICK: Duration = Duration::from_millis(10);
const SMS: u32 = 132;

fn pct(p: f64) -> Utilization {
    Utilization::from_percent(p).unwrap()
}

fn secs(s: f64) -> Time {
    Time::from_secs_f64(s)
}

fn sm_sim(cfg: SimConfig, target: f64, shaping: SmShaping) -> Simulation {
    let settings = FillSettings {
        target: pct(target),
        shaping: Shaping::Sm(shaping),
        ..FillSettings::default()
    };
    Simulation::with_gpu(
        SimGpu::new(cfg),
        true,
        &LoopSettings {
            fill: settings,
            ..LoopSettings::default()
        },
        TICK,
    )
}

/// A model whose cheapest width is inside the range (watts convex in width), so the
/// hysteresis is what keeps the width still.
fn convex() -> SmShaping {
    SmShaping {
        model: PowerModel {
            per_duty_w: 45.0,
            per_sm_w: 200.0,
            sm_exponent: 2.0,
            ..PowerModel::default()
        },
        ..SmShaping::new(SMS)
    }
}

/// Width changes among the filling ticks at or after `from`.
fn width_changes(ticks: &[Tick], from: Time) -> usize {
    let widths: Vec<u32> = ticks
        .iter()
        .filter(|t| t.at >= from && t.state == State::Filling)
        .map(|t| t.width.get())
        .collect();
    widths.windows(2).filter(|w| w[0] != w[1]).count()
}

#[test]
fn sm_targets_settle_within_two_seconds_and_track_within_two_points() {
    for shaping in [SmShaping::new(SMS), convex()] {
        for target in [10.0, 30.0, 50.0, 70.0] {
            let mut s = sm_sim(SimConfig::default(), target, shaping);
            let ticks = s.collect_until(secs(20.0));
            let t = tracking(&ticks, Time::ZERO, secs(20.0), pct(target), 2.0);
            let label = format!("{target}% {:?}", shaping.model);
            assert!(
                t.settle.unwrap() <= Duration::from_secs(2),
                "{label}: {t:?}"
            );
            assert!(t.mean_abs_error <= 2.0, "{label}: {t:?}");
            assert!(t.samples >= 80, "{label}: {t:?}");
            for tick in &ticks {
                assert!((1..=SMS).contains(&tick.width.get()), "{label}: {tick:?}");
            }
            // No flapping once settled: at most one step as the integral finishes.
            let steady = Time::ZERO + t.settle.unwrap() + Duration::from_secs(1);
            assert!(width_changes(&ticks, steady) <= 1, "{label}");
        }
    }
}

#[test]
fn the_default_model_fills_every_sm_for_the_shortest_time() {
    let mut s = sm_sim(SimConfig::default(), 30.0, SmShaping::new(SMS));
    let ticks = s.collect_until(secs(10.0));
    let last = ticks.last().unwrap();
    assert_eq!(last.width.get(), SMS);
    // About 30 % duty (plus the launch-overhead shortfall the integral makes up).
    assert!((30.0..=33.0).contains(&last.duty.percent()), "{last:?}");
}

#[test]
fn a_convex_model_settles_on_a_middle_width_without_flapping() {
    let mut s = sm_sim(SimConfig::default(), 30.0, convex());
    let ticks = s.collect_until(secs(30.0));
    let last = ticks.last().unwrap();
    assert!((20..SMS).contains(&last.width.get()), "{last:?}");
    assert_eq!(width_changes(&ticks, secs(3.0)), 0);
}

#[test]
fn width_is_bounded_by_the_device_sm_count() {
    let cfg = SimConfig {
        sm_count: 16,
        ..SimConfig::default()
    };
    let mut s = sm_sim(cfg, 70.0, SmShaping::new(16));
    let ticks = s.collect_until(secs(10.0));
    assert!(ticks.iter().all(|t| (1..=16).contains(&t.width.get())));
    let t = tracking(&ticks, Time::ZERO, secs(10.0), pct(70.0), 2.0);
    assert!(t.settle.unwrap() <= Duration::from_secs(2), "{t:?}");
}

#[test]
fn a_foreign_process_still_makes_it_yield_with_the_sm_metric() {
    let cfg = SimConfig {
        foreign: vec![ForeignJob::compute_bound(5.0, 8.0, 1.0)],
        ..SimConfig::default()
    };
    let mut s = sm_sim(cfg, 50.0, SmShaping::new(SMS));
    let ticks = s.collect_until(secs(20.0));
    // Idle before the foreign job's first kernel (85 ms after it is listed).
    let at = |t: f64| ticks.iter().find(|k| k.at >= secs(t)).unwrap();
    assert_eq!(at(4.9).state, State::Filling);
    assert_eq!(at(5.02).state, State::Yielding);
    assert!(at(5.02).duty.is_zero());
    let report = s.gpu().report(secs(20.0));
    assert_eq!(report.foreign[0].overlap, Duration::ZERO, "{report:?}");
    // Back after the 5 s grace, and on target again.
    assert_eq!(at(13.5).state, State::Filling);
    let t = tracking(&ticks, secs(13.1), secs(20.0), pct(50.0), 2.0);
    assert!(t.settle.unwrap() <= Duration::from_secs(2), "{t:?}");
}

/// The simulated SM reading with deterministic noise of up to `amplitude` points, as
/// GPM's 200 ms readings wobble on a real GPU.
struct Noisy {
    inner: SimProbe,
    amplitude: f64,
    seed: u64,
}

impl Probe for Noisy {
    type Error = <SimProbe as Probe>::Error;

    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, Self::Error> {
        Ok(self.inner.utilization(now)?.map(|u| {
            self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            Utilization::saturating_from_fraction(u.fraction() + unit * self.amplitude / 100.0)
        }))
    }

    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Self::Error> {
        self.inner.foreign_processes(now)
    }
}

/// 30 s at `target` with readings noisy by 1.5 points; the ticks.
fn noisy_run(target: f64, shaping: SmShaping) -> Vec<Tick> {
    let gpu = SimGpu::new(SimConfig::default());
    let probe = Noisy {
        inner: gpu.sm_probe(),
        amplitude: 1.5,
        seed: 7,
    };
    let settings = FillSettings {
        target: pct(target),
        shaping: Shaping::Sm(shaping),
        ..FillSettings::default()
    };
    let policy = YieldPolicy::new(YieldSettings::default());
    let mut fill = FillLoop::new(
        probe,
        gpu.load(),
        ControllerKind::Pi.build(),
        policy,
        settings,
    );
    (0..3000)
        .map(|i| fill.step(Time::from_millis(i * 10)))
        .collect()
}

#[test]
fn noisy_readings_do_not_make_the_width_flap() {
    // At 70 % the convex model's width is the narrowest that reaches the share at full
    // duty, so every wobble of the controller's output asks for another width.
    let ticks = noisy_run(70.0, convex());
    // The noise alone crosses 2 points now and then, so judge every sample from 5 s on.
    let t = tracking(&ticks, secs(5.0), secs(30.0), pct(70.0), 100.0);
    assert!(t.mean_abs_error <= 2.0, "{t:?}");
    assert!(
        width_changes(&ticks, secs(5.0)) <= 2,
        "{}",
        width_changes(&ticks, secs(5.0))
    );
    // The control: without hysteresis the same noise moves the width again and again.
    let loose = SmShaping {
        hysteresis: 0.0,
        ..convex()
    };
    let ticks = noisy_run(70.0, loose);
    assert!(width_changes(&ticks, secs(5.0)) > 20);
}
