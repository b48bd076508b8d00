//! `gpufill simulate`'s run: the real fill loop against the simulated GPU, in virtual
//! time, its table and its summary. The binary parses the flags into a [`Scenario`],
//! writes the table's and the CSV's [`Rows`] from [`Hooks::tick`], and prints the
//! [`Report`]; everything else (the simulated GPU's jobs, the steering, MPS, reloads,
//! what the summary judges, the rows' columns) is here, and tested here.
//!
//! [`SimRun::new`] builds a run, [`SimRun::drive`] steps it to its end (or until
//! [`Hooks::stop`]), [`SimRun::report`] summarizes it.

use std::time::Duration;

use gpufill_core::{Event, LaunchShape, Tick};
use gpufill_sim::{
    Arrivals, Churn, ChurnReport, ForeignJob, HostJitter, LongRunStats, Period, SimConfig, SimGpu,
    Simulation,
};

use crate::mps::{MpsFollower, SimDaemon};
use crate::{
    DayClock, Metric, Publisher, Settings, State, Steering, Time, TimeOfDay, with_launch_settings,
};

mod report;
mod rows;
mod spec;

pub use report::{MpsReport, Report};
pub use rows::Rows;
pub use spec::{MAX_REQUESTS_PER_S, MAX_SIMULATED_S, MAX_STEP_MS};

/// How busy a `--service` keeps the GPU inside a burst: ResNet-50 requests at batch 1
/// are CPU-bound, about 0.4 (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps).
const SERVICE_LOAD: f64 = 0.4;

/// One `--foreign START-END:LOAD`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForeignSpec {
    /// When it appears, in seconds.
    pub start_s: f64,
    /// When it leaves, in seconds.
    pub end_s: f64,
    /// Share of time it wants the GPU, percent.
    pub load_percent: f64,
}

/// One `--service`: when the service is there and how its requests come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServiceSpec {
    /// When it appears, in seconds.
    pub start_s: f64,
    /// When it leaves, in seconds.
    pub end_s: f64,
    /// How its requests come.
    pub requests: ServiceRequests,
}

/// How a `--service`'s requests come.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ServiceRequests {
    /// `EVERY:BURST`: a burst of requests lasting `burst_s` every `every_s` seconds.
    Bursts {
        /// Seconds from one burst to the next.
        every_s: f64,
        /// Seconds each burst lasts.
        burst_s: f64,
    },
    /// `RATE/s:LENGTHms[:gpu]`: isolated requests, `per_s` a second, each `request_ms`
    /// alone.
    Rate {
        /// Requests a second (Poisson).
        per_s: f64,
        /// Milliseconds each takes alone.
        request_ms: f64,
        /// `:gpu`: their kernels fill every SM in a few waves (`ForeignJob::filling_every_sm`).
        fills_every_sm: bool,
    },
}

/// One `--training`: when the job is there, how long each step keeps the GPU busy, and
/// how long it then waits on its input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingSpec {
    /// When it appears, in seconds.
    pub start_s: f64,
    /// When it leaves, in seconds.
    pub end_s: f64,
    /// Milliseconds each step keeps the GPU busy alone.
    pub step_ms: f64,
    /// Milliseconds it waits on its input after each step.
    pub wait_ms: f64,
}

/// What a simulated run is: how long, the simulated GPU's foreign work and setup. The
/// binary's `simulate` flags of the same names; checked there.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Simulated seconds to run.
    pub duration_s: f64,
    /// Compute-bound foreign jobs.
    pub foreign: Vec<ForeignSpec>,
    /// Services answering requests.
    pub service: Vec<ServiceSpec>,
    /// Training jobs that wait on their input.
    pub training: Vec<TrainingSpec>,
    /// NVML's sampling period on the simulated GPU, in milliseconds.
    pub sample_ms: u64,
    /// An MPS server runs (kernels of different processes run together).
    pub mps: bool,
    /// With `mps`: the second its control daemon is told to quit.
    pub mps_quit_at: Option<f64>,
    /// gpufill runs in a PID namespace of its own (foreign jobs are not listed).
    pub pid_namespace: bool,
    /// The host's own jitter in our kernels' timing (seeded by `seed`).
    pub host_jitter: bool,
    /// Random foreign jobs arriving at this mean rate per hour (Poisson).
    pub random_foreign: Option<f64>,
    /// Seed of `random_foreign` and `host_jitter`.
    pub seed: u64,
}

impl Default for Scenario {
    /// 20 s alone on the simulated GPU, sampled every 200 ms: `gpufill simulate`'s
    /// defaults.
    fn default() -> Self {
        Scenario {
            duration_s: 20.0,
            foreign: Vec::new(),
            service: Vec::new(),
            training: Vec::new(),
            sample_ms: 200,
            mps: false,
            mps_quit_at: None,
            pid_namespace: false,
            host_jitter: false,
            random_foreign: None,
            seed: 1,
        }
    }
}

impl Scenario {
    /// The simulated GPU: its foreign jobs and services, NVML's sampling, MPS and the PID
    /// view, and our kernels laid out as `settings` say (`load.period_ms`,
    /// `load.max_kernel_us`, `load.beside_kernel_us`), as the CUDA launcher lays them.
    pub fn sim_config(&self, settings: &Settings) -> SimConfig {
        let services = self.service.iter().map(|v| match v.requests {
            ServiceRequests::Bursts { every_s, burst_s } => ForeignJob::service(
                v.start_s,
                v.end_s,
                Duration::from_secs_f64(every_s),
                Duration::from_secs_f64(burst_s),
                SERVICE_LOAD,
            ),
            ServiceRequests::Rate {
                per_s,
                request_ms,
                fills_every_sm,
            } => {
                let job = ForeignJob::isolated_requests(
                    v.start_s,
                    v.end_s,
                    per_s,
                    Duration::from_secs_f64(request_ms / 1e3),
                );
                if fills_every_sm {
                    job.filling_every_sm()
                } else {
                    job
                }
            }
        });
        let cfg = with_launch_settings(
            SimConfig {
                sample_period: Duration::from_millis(self.sample_ms),
                mps: self.mps,
                foreign: self
                    .foreign
                    .iter()
                    .map(|f| ForeignJob::compute_bound(f.start_s, f.end_s, f.load_percent / 100.0))
                    .chain(services)
                    .chain(self.training.iter().map(training_job))
                    .collect(),
                // As measured (the constant's docs): a service's bursts shorter than this
                // never appear in its per-process samples.
                process_sample_min_run: SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN,
                host_jitter: self.host_jitter.then(|| HostJitter::seeded(self.seed)),
                ..SimConfig::default()
            },
            settings,
        );
        // The view from inside a PID namespace of our own (issue 14).
        if self.pid_namespace {
            cfg.pid_namespace()
        } else {
            cfg
        }
    }

    /// Whether the report adds the random jobs and the hourly table.
    fn long_or_churning(&self) -> bool {
        self.random_foreign.is_some() || self.duration_s > 3600.0
    }
}

/// The job of a `--training` ([`ForeignJob::training`]).
fn training_job(spec: &TrainingSpec) -> ForeignJob {
    ForeignJob::training(
        spec.start_s,
        spec.end_s,
        Duration::from_secs_f64(spec.step_ms / 1e3),
        Duration::from_secs_f64(spec.wait_ms / 1e3),
    )
}

/// What the caller of [`SimRun::drive`] does around its steps: signals, reloads, the
/// table, the pace.
pub trait Hooks {
    /// Asked before each step: stop here (a signal, or the table cannot be written)?
    fn stop(&mut self) -> bool;
    /// New settings to take before this step (a reload), if any.
    fn reload(&mut self) -> Option<Settings>;
    /// Each tick, as it is stepped.
    fn tick(&mut self, tick: &Tick);
    /// After each step, at virtual time `now` (to pace it to the wall clock).
    fn stepped(&mut self, now: Time);
}

/// A simulated GPU, the real loop on it and what steers it.
pub struct SimRun {
    sim: Simulation,
    steering: Steering,
    settings: Settings,
    sm: bool,
    sm_count: u32,
    /// With `mps`: the simulated daemon, as gpufill follows it.
    mps: Option<MpsFollower>,
}

impl SimRun {
    /// The simulated GPU of `scenario` under a loop built from `settings`, its schedule
    /// on a virtual clock starting at `start_time`, publishing to `publisher`.
    pub fn new(
        scenario: &Scenario,
        settings: Settings,
        start_time: TimeOfDay,
        publisher: Option<Publisher>,
    ) -> SimRun {
        let cfg = scenario.sim_config(&settings);
        let sm_count = cfg.sm_count;
        let sm = settings.metric == Metric::Sm;
        let recipe = settings.loop_settings(sm_count, scenario.mps);
        let sim = Simulation::with_gpu(SimGpu::new(cfg), sm, &recipe, settings.tick());
        let steering = Steering::new(&settings, scenario.mps, DayClock::StartingAt(start_time))
            .with_publisher(publisher.map(|p| p.measuring_sm_activity(sm)));
        let mps = scenario.mps.then(|| {
            MpsFollower::new(SimDaemon::new(
                scenario.mps_quit_at.map(Time::from_secs_f64),
            ))
        });
        SimRun {
            sim,
            steering,
            settings,
            sm,
            sm_count,
            mps,
        }
    }

    /// Whether the loop measures SM activity (`metric = "sm"`) rather than utilization.
    pub fn measures_sm(&self) -> bool {
        self.sm
    }

    /// The settings the loop runs with now (after any reload).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Follows the simulated MPS daemon at `now`: once it is told to quit, our loop
    /// leaves it and starts afresh without MPS, as `gpufill run` restarts.
    fn follow_mps(&mut self, now: Time) {
        let Some(follower) = self.mps.as_mut() else {
            return;
        };
        if follower.leaves_at(self.sim.gpu(), now) {
            let recipe = self.settings.loop_settings(self.sm_count, false);
            self.sim.restart_without_mps(self.sm, &recipe);
            self.steering.set_mps(false);
        }
    }

    fn reload(&mut self, new: Settings) {
        let (settings, _) = self.settings.live_update(new);
        self.steering.apply(self.sim.fill_mut(), &settings);
        self.settings = settings;
    }

    /// Steps the loop in virtual time to `scenario.duration_s` (or until the loop stops
    /// or `hooks` says stop), handing each tick to `hooks`, and keeps what the report
    /// needs.
    pub fn drive(&mut self, scenario: &Scenario, hooks: &mut dyn Hooks) -> Recorded {
        let tick_len = self.settings.tick();
        let end = Time::from_secs_f64(scenario.duration_s);
        let mut arrivals = Arrivals::new(
            scenario.seed,
            scenario.random_foreign.unwrap_or(0.0),
            (Duration::from_secs(10), Duration::from_secs(600)),
            Time::ZERO,
        );
        // Tracking is judged up to the first foreign arrival, where the target stops
        // being ours to hold, and in runs over an hour within the first hour (the hourly
        // table covers the rest). Only the ticks the report reads are kept: those with a
        // sample, a new target or a new width, so memory grows with the samples (5 a
        // second at the default sampling), not with the ticks.
        let long = scenario.duration_s > 3600.0;
        let judged_s = scenario
            .foreign
            .iter()
            .map(|f| f.start_s)
            .chain(scenario.service.iter().map(|v| v.start_s))
            .chain(scenario.training.iter().map(|v| v.start_s))
            .fold(scenario.duration_s.min(arrivals.next_at()), f64::min);
        let judged_until = Time::from_secs_f64(if long { judged_s.min(3600.0) } else { judged_s });
        let mut ticks: Vec<Tick> = Vec::new();
        let (mut pauses, mut unexplained) = (0, 0);
        let mut hours = LongRunStats::new(Duration::from_secs(3600), Duration::from_secs(3));
        let mut churn = Churn::new(&mut arrivals);
        let mut last_state = None;
        let mut filled_gaps = false;
        let mut stopped = false;
        while self.sim.now() < end && !stopped {
            if hooks.stop() {
                break;
            }
            if let Some(new) = hooks.reload() {
                self.reload(new);
            }
            let now = self.sim.now();
            self.follow_mps(now);
            churn.before_tick(&self.sim);
            self.steering.before_step(self.sim.fill_mut(), now);
            let mut stepped = None;
            let steering = &mut self.steering;
            self.sim.run_until(now + tick_len, |tick| {
                hooks.tick(tick);
                steering.after_step(tick, || (None, None));
                stopped = tick.state == State::Stopped;
                last_state = Some((tick.at, tick.state));
                filled_gaps |= tick.shape == LaunchShape::Gaps;
                hours.record(tick);
                for e in &tick.events {
                    pauses += usize::from(matches!(e, Event::Paused { .. }));
                    unexplained += usize::from(matches!(e, Event::Unexplained { .. }));
                }
                let new_shape = ticks.last().is_none_or(|t| {
                    t.target != tick.target || t.width != tick.width || t.state != tick.state
                });
                if tick.at < judged_until && (tick.sample.is_some() || new_shape) {
                    ticks.push(tick.clone());
                }
                stepped = Some(tick.clone());
            });
            if let Some(tick) = stepped {
                churn.after_tick(&self.sim, &tick);
            }
            hooks.stepped(self.sim.now());
        }
        Recorded {
            ticks,
            judged_until,
            pauses,
            unexplained,
            hours: hours.periods().to_vec(),
            churn: churn.finish(&self.sim),
            last_state,
            filled_gaps,
        }
    }
}

/// What [`SimRun::drive`] kept for the report.
pub struct Recorded {
    ticks: Vec<Tick>,
    judged_until: Time,
    /// Pauses over the whole run, and signs of our kernels taken for the host's jitter.
    pauses: usize,
    unexplained: usize,
    hours: Vec<Period>,
    churn: ChurnReport,
    last_state: Option<(Time, State)>,
    /// Whether the loop filled gaps at some tick.
    filled_gaps: bool,
}

#[cfg(test)]
mod tests;
