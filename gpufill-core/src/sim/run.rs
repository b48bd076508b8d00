//! Running the real fill loop against the simulated GPU in virtual time, and judging
//! the result.

use std::time::Duration;

use super::churn::Arrivals;
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

    /// Like [`Simulation::run_until`], with foreign jobs from `arrivals` added shortly
    /// before they are listed and retired after they leave, so memory stays bounded
    /// however long the run and however many jobs come and go.
    pub fn run_with_arrivals(
        &mut self,
        until: Time,
        arrivals: &mut Arrivals,
        mut on_tick: impl FnMut(&Tick),
    ) -> ChurnReport {
        const CHUNK: Duration = Duration::from_secs(1);
        const RETIRE_EVERY: Duration = Duration::from_secs(10);
        let mut report = ChurnReport::default();
        let mut next_retire = self.now() + RETIRE_EVERY;
        let mut stopped = false;
        while self.now() < until && !stopped {
            let chunk_end = (self.now() + CHUNK).min(until);
            while let Some(job) = arrivals.next_before(chunk_end) {
                report.arrived += 1;
                self.gpu.add_foreign(job);
            }
            report.max_retained = report.max_retained.max(self.gpu.foreign_len());
            while self.now() < chunk_end {
                let now = self.now();
                let tick = self.fill.step(now);
                if !tick.duty.is_zero() && self.gpu.listed_count(now) > 0 {
                    report.filling_while_listed += 1;
                }
                on_tick(&tick);
                if tick.state == crate::fill::State::Stopped {
                    stopped = true;
                    break;
                }
                self.clock.sleep_until(now + self.tick);
            }
            if self.now() >= next_retire {
                self.absorb(self.gpu.retire_foreign(self.now()), &mut report);
                next_retire = self.now() + RETIRE_EVERY;
            }
        }
        let rest = self.gpu.report(self.now()).foreign;
        self.absorb(rest, &mut report);
        report
    }

    fn absorb(&self, retired: Vec<super::ForeignReport>, report: &mut ChurnReport) {
        for job in retired {
            report.overlap += job.overlap;
            report.worst_slowdown = report.worst_slowdown.max(job.slowdown);
            report.retired += 1;
        }
    }

    /// Like [`Simulation::run_until`], collecting the ticks.
    pub fn collect_until(&mut self, until: Time) -> Vec<Tick> {
        let mut ticks = Vec::new();
        self.run_until(until, |t| ticks.push(t.clone()));
        ticks
    }
}

/// What happened to the foreign jobs of [`Simulation::run_with_arrivals`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChurnReport {
    /// Jobs that arrived.
    pub arrived: u64,
    /// Jobs accounted for (retired after leaving, or still there at the end).
    pub retired: u64,
    /// The most jobs the simulated GPU held at once (bounded by retiring).
    pub max_retained: usize,
    /// Ticks that ended with a non-zero duty while the GPU listed a foreign process.
    pub filling_while_listed: u64,
    /// Time our kernels were resident while a foreign job ran its kernels, summed.
    pub overlap: Duration,
    /// The largest share of its progress a foreign job lost.
    pub worst_slowdown: f64,
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
