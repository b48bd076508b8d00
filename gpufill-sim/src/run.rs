//! Running the real fill loop against the simulated GPU in virtual time, and judging
//! the result.

use std::time::Duration;

use super::churn::Arrivals;
use super::config::SimConfig;
use super::handles::{SimGpu, SimLoad, SimProbe};
use gpufill_core::drive::{Driven, drive};
use gpufill_core::fill::{FillLoop, Loop, LoopSettings, State, Tick};
use gpufill_core::hint::NoHint;
use gpufill_core::time::{Clock, Time, VirtualClock};
use gpufill_core::units::Utilization;

/// The fill loop of one simulated GPU, on a virtual clock.
pub struct Simulation {
    gpu: SimGpu,
    fill: Loop<SimProbe, SimLoad>,
    clock: VirtualClock,
    tick: Duration,
}

impl Simulation {
    /// A simulation of `cfg` with the loop `settings` describe, ticking every `tick`.
    pub fn new(cfg: SimConfig, settings: &LoopSettings, tick: Duration) -> Self {
        Self::with_gpu(SimGpu::new(cfg), false, settings, tick)
    }

    /// A simulation of an existing GPU; `sm_metric` makes the loop read SM activity.
    pub fn with_gpu(gpu: SimGpu, sm_metric: bool, settings: &LoopSettings, tick: Duration) -> Self {
        let probe = if sm_metric {
            gpu.sm_probe()
        } else {
            gpu.probe()
        };
        let fill = FillLoop::build(probe, gpu.load(), settings);
        Self::with_loop(gpu, fill, tick)
    }

    /// A simulation of `gpu` driving a loop built over its probe and load source by
    /// other means (a controller of its own, as the controller benches use).
    pub fn with_loop(gpu: SimGpu, fill: Loop<SimProbe, SimLoad>, tick: Duration) -> Self {
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
    pub fn fill_mut(&mut self) -> &mut Loop<SimProbe, SimLoad> {
        &mut self.fill
    }

    /// Our process leaves MPS and starts afresh, as `gpufill run` does when its daemon
    /// is told to quit: a new loop from `settings` (built for no MPS), reading SM
    /// activity where `sm_metric` says, on the same GPU at the same time.
    pub fn restart_without_mps(&mut self, sm_metric: bool, settings: &LoopSettings) {
        self.gpu.leave_mps();
        let probe = if sm_metric {
            self.gpu.sm_probe()
        } else {
            self.gpu.probe()
        };
        self.fill = FillLoop::build(probe, self.gpu.load(), settings);
    }

    /// Moves the virtual clock on to `t` without stepping the loop, so that its first
    /// step comes at `t`: what happened on the GPU before (a job that started first), it
    /// finds there. Does nothing once the clock is past `t`.
    pub fn start_at(&mut self, t: Time) {
        self.clock.sleep_until(t);
    }

    /// The virtual time now.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// Steps the loop every tick until `until` (exclusive), handing each tick to `on_tick`.
    /// Stops early if the loop stops.
    pub fn run_until(&mut self, until: Time, on_tick: impl FnMut(&Tick)) {
        self.drive_until(until, |fill, _, now| fill.step(now), on_tick);
    }

    /// Steps the loop with `step` (a step and what goes around it) through the one
    /// driver every loop runs on ([`drive`]), on the virtual clock, until `until`
    /// (exclusive) or the loop stops; the clock then stands one tick after the last
    /// step, where the next call goes on.
    fn drive_until(
        &mut self,
        until: Time,
        step: impl FnMut(&mut Loop<SimProbe, SimLoad>, &SimGpu, Time) -> Tick,
        mut on_tick: impl FnMut(&Tick),
    ) {
        if self.clock.now() >= until {
            return;
        }
        let tick = self.tick;
        let mut stepping = Stepping {
            fill: &mut self.fill,
            gpu: &self.gpu,
            step,
        };
        let last = drive(&self.clock, tick, &mut NoHint, &mut stepping, |t| {
            on_tick(t);
            t.state != State::Stopped && t.at + tick < until
        });
        if last.state != State::Stopped {
            self.clock.sleep_until(last.at + tick);
        }
    }

    /// Like [`Simulation::run_until`], with foreign jobs from `arrivals` added shortly
    /// before they are listed and retired after they leave ([`Churn`]), so memory stays
    /// bounded however long the run and however many jobs come and go.
    pub fn run_with_arrivals(
        &mut self,
        until: Time,
        arrivals: &mut Arrivals,
        on_tick: impl FnMut(&Tick),
    ) -> ChurnReport {
        let mut churn = Churn::new(arrivals);
        self.drive_until(
            until,
            |fill, gpu, now| {
                churn.before(gpu, now);
                let tick = fill.step(now);
                churn.after(gpu, &tick);
                tick
            },
            on_tick,
        );
        churn.finish(self)
    }

    /// Like [`Simulation::run_until`], collecting the ticks.
    pub fn collect_until(&mut self, until: Time) -> Vec<Tick> {
        let mut ticks = Vec::new();
        self.run_until(until, |t| ticks.push(t.clone()));
        ticks
    }
}

/// Feeds random foreign jobs into a [`Simulation`] as it runs, one tick at a time:
/// call [`Churn::before_tick`] before each step and [`Churn::after_tick`] after it.
/// Jobs are added up to a second before they are listed and retired every 10 s once
/// they have left, so the simulated GPU holds only the jobs around now.
pub struct Churn<'a> {
    arrivals: &'a mut Arrivals,
    report: ChurnReport,
    added_until: Time,
    next_retire: Time,
}

impl<'a> Churn<'a> {
    const AHEAD: Duration = Duration::from_secs(1);
    const RETIRE_EVERY: Duration = Duration::from_secs(10);

    /// Feeds jobs from `arrivals`.
    pub fn new(arrivals: &'a mut Arrivals) -> Self {
        Churn {
            arrivals,
            report: ChurnReport::default(),
            added_until: Time::ZERO,
            next_retire: Time::ZERO + Self::RETIRE_EVERY,
        }
    }

    /// Adds the jobs listed within the next second and retires those gone (cheap
    /// when neither is due).
    pub fn before_tick(&mut self, sim: &Simulation) {
        self.before(&sim.gpu, sim.now());
    }

    /// [`Churn::before_tick`] on `gpu` at `now`.
    fn before(&mut self, gpu: &SimGpu, now: Time) {
        if now >= self.added_until {
            self.added_until = now + Self::AHEAD;
            while let Some(job) = self.arrivals.next_before(self.added_until) {
                self.report.arrived += 1;
                gpu.add_foreign(job);
            }
            let kept = gpu.foreign_len();
            self.report.max_retained = self.report.max_retained.max(kept);
            let pending = gpu.pending_active_len();
            self.report.max_pending_active = self.report.max_pending_active.max(pending);
        }
        if now >= self.next_retire {
            let retired = gpu.retire_foreign(now);
            self.absorb(retired);
            self.next_retire = now + Self::RETIRE_EVERY;
        }
    }

    /// Checks the step's tick: a non-zero duty while a job is listed is counted.
    pub fn after_tick(&mut self, sim: &Simulation, tick: &Tick) {
        self.after(&sim.gpu, tick);
    }

    /// [`Churn::after_tick`] on `gpu`.
    fn after(&mut self, gpu: &SimGpu, tick: &Tick) {
        if !tick.duty.is_zero() && gpu.listed_count(tick.at) > 0 {
            self.report.filling_while_listed += 1;
        }
    }

    /// The report, with the jobs still around accounted for.
    pub fn finish(mut self, sim: &Simulation) -> ChurnReport {
        let rest = sim.gpu.report(sim.now()).foreign;
        self.absorb(rest);
        self.report
    }

    fn absorb(&mut self, jobs: Vec<super::job::ForeignReport>) {
        for job in jobs {
            self.report.overlap += job.overlap;
            self.report.worst_slowdown = self.report.worst_slowdown.max(job.slowdown);
            self.report.retired += 1;
        }
    }
}

/// What happened to the foreign jobs of a [`Churn`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChurnReport {
    /// Jobs that arrived.
    pub arrived: u64,
    /// Jobs accounted for (retired after leaving, or still there at the end).
    pub retired: u64,
    /// The most jobs the simulated GPU held at once (bounded by retiring).
    pub max_retained: usize,
    /// The most PIDs seen working that the simulated GPU kept at once for the next
    /// per-process activity read (bounded like the jobs).
    pub max_pending_active: usize,
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

/// The simulated loop with the step it is driven by ([`Simulation::drive_until`]).
struct Stepping<'a, F> {
    fill: &'a mut Loop<SimProbe, SimLoad>,
    gpu: &'a SimGpu,
    step: F,
}

impl<F> Driven for Stepping<'_, F>
where
    F: FnMut(&mut Loop<SimProbe, SimLoad>, &SimGpu, Time) -> Tick,
{
    type Step = Tick;

    fn step(&mut self, now: Time) -> Tick {
        (self.step)(self.fill, self.gpu, now)
    }
}
