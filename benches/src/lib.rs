//! Shared pieces of gpufill's benches: a controller-tuning sweep on the simulated GPU.
//!
//! `cargo bench -p gpufill-bench` runs two criterion benches:
//! - `loop_step`: the CPU cost of one fill-loop step (bare, and with the simulated GPU);
//! - `controller`: settle time (virtual) of each controller across targets and NVML
//!   sampling periods, with the mean tracking error printed beside it. Use it to tune
//!   gains: change [`gpufill_core::PiGains`] and compare.

use std::time::Duration;

use gpufill_core::{Controller, FillLoop, FillSettings, Time, Utilization, YieldPolicy};
use gpufill_sim::{SimConfig, SimGpu, Simulation, Tracking, tracking};

/// One point of the sweep.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Target, percent.
    pub target: f64,
    /// NVML sampling period of the simulated GPU.
    pub sample_period: Duration,
    /// Simulated run length.
    pub run: Duration,
}

/// Runs `controller` on the simulated GPU for `case` and judges it (2-point tolerance).
pub fn track(case: Case, controller: Box<dyn Controller + Send>) -> Tracking {
    let target = Utilization::from_percent(case.target).expect("bench targets are percents");
    let cfg = SimConfig {
        sample_period: case.sample_period,
        ..SimConfig::default()
    };
    let settings = FillSettings {
        target,
        ..FillSettings::default()
    };
    let tick = Duration::from_millis(10);
    let gpu = SimGpu::new(cfg);
    let fill = FillLoop::new(
        gpu.probe(),
        gpu.load(),
        controller,
        YieldPolicy::default(),
        settings,
    );
    let mut sim = Simulation::with_loop(gpu, fill, tick);
    let end = Time::from_duration(case.run);
    let ticks = sim.collect_until(end);
    tracking(&ticks, Time::ZERO, end, target, 2.0)
}

/// The sweep: targets 10-90 % at sampling periods of 1/6 s, 200 ms and 1 s.
pub fn cases(run: Duration) -> Vec<Case> {
    let mut out = Vec::new();
    for period_ms in [167, 200, 1000] {
        for target in [10.0, 25.0, 50.0, 75.0, 90.0] {
            out.push(Case {
                target,
                sample_period: Duration::from_millis(period_ms),
                run,
            });
        }
    }
    out
}
