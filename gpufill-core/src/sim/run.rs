//! Running the real fill loop against the simulated GPU in virtual time, and judging
//! the result.

use std::time::Duration;

use super::model::{SimConfig, SimGpu, SimLoad, SimProbe};
use crate::controller::Controller;
use crate::fill::{FillLoop, FillSettings, Tick};
use crate::policy::{YieldPolicy, YieldSettings};
use crate::time::{Clock, Time, VirtualClock};
use crate::units::Utilization;

/// The fill loop of one simulated GPU, on a virtual clock.
pub struct Simulation {
    gpu: SimGpu,
    fill: FillLoop<SimProbe, SimLoad, Box<dyn Controller + Send>>,
    clock: VirtualClock,
    tick: Duration,
}

impl Simulation {
    /// A simulation of `cfg` driven by the given loop settings, ticking every `tick`.
    pub fn new(
        cfg: SimConfig,
        settings: FillSettings,
        yielding: YieldSettings,
        controller: Box<dyn Controller + Send>,
        tick: Duration,
    ) -> Self {
        Self::with_gpu(
            SimGpu::new(cfg),
            false,
            settings,
            yielding,
            controller,
            tick,
        )
    }

    /// A simulation of an existing GPU; `sm_metric` makes the loop read SM activity.
    pub fn with_gpu(
        gpu: SimGpu,
        sm_metric: bool,
        settings: FillSettings,
        yielding: YieldSettings,
        controller: Box<dyn Controller + Send>,
        tick: Duration,
    ) -> Self {
        let probe = if sm_metric {
            gpu.sm_probe()
        } else {
            gpu.probe()
        };
        let fill = FillLoop::new(
            probe,
            gpu.load(),
            controller,
            YieldPolicy::new(yielding),
            settings,
        );
        Simulation {
            gpu,
            fill,
            clock: VirtualClock::default(),
            tick: tick.max(Duration::from_micros(100)),
        }
    }

    /// The simulated GPU.
    pub fn gpu(&self) -> &SimGpu {
        &self.gpu
    }

    /// The loop (to change the target between runs).
    pub fn fill_mut(&mut self) -> &mut FillLoop<SimProbe, SimLoad, Box<dyn Controller + Send>> {
        &mut self.fill
    }

    /// The virtual time now.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// Steps the loop every tick until `until` (exclusive), handing each tick to `on_tick`.
    /// Stops early if the loop stops.
    pub fn run_until(&mut self, until: Time, mut on_tick: impl FnMut(&Tick)) {
        while self.clock.now() < until {
            let tick = self.fill.step(self.clock.now());
            on_tick(&tick);
            if tick.state == crate::fill::State::Stopped {
                return;
            }
            self.clock.sleep_until(self.clock.now() + self.tick);
        }
    }

    /// Like [`Simulation::run_until`], collecting the ticks.
    pub fn collect_until(&mut self, until: Time) -> Vec<Tick> {
        let mut ticks = Vec::new();
        self.run_until(until, |t| ticks.push(t.clone()));
        ticks
    }
}

/// How well a run held its target, judged from the device's own samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tracking {
    /// Time from `from` to the first sample from which every later sample stays within
    /// the tolerance; `None` if it never settles.
    pub settle: Option<Duration>,
    /// Mean absolute error, in percentage points, of the samples after settling
    /// (NaN if there are none).
    pub mean_abs_error: f64,
    /// Number of samples after settling.
    pub samples: usize,
}

/// Judges the filling samples of `ticks` taken in `[from, to)` against `target`.
pub fn tracking(
    ticks: &[Tick],
    from: Time,
    to: Time,
    target: Utilization,
    tolerance_points: f64,
) -> Tracking {
    let samples: Vec<(Time, f64)> = ticks
        .iter()
        .filter(|t| t.at >= from && t.at < to)
        .filter_map(|t| t.sample.map(|s| (t.at, s.percent() - target.percent())))
        .collect();
    let first_good = samples
        .iter()
        .rposition(|(_, e)| e.abs() > tolerance_points)
        .map_or(0, |bad| bad + 1);
    let settled = &samples[first_good.min(samples.len())..];
    let settle = settled.first().map(|(t, _)| *t - from);
    let mean_abs_error = settled.iter().map(|(_, e)| e.abs()).sum::<f64>() / settled.len() as f64;
    Tracking {
        settle,
        mean_abs_error,
        samples: settled.len(),
    }
}
