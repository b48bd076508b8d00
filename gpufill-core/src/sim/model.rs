//! The simulated GPU's state and its two handles.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::job::{ForeignJob, ForeignReport, Ran, Tally};
use crate::device::{DeviceError, ErrorKind, LaunchShape, LoadSource, Probe, ProcessInfo};
use crate::time::Time;
use crate::units::{Load, Utilization};
use crate::unlisted::{MemoryReading, PidView, UnexplainedMemory, Unlisted};

const MIB: u64 = 1 << 20;

/// What the simulated GPU is and what happens to it.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// NVML's sampling period (200 ms on the H200).
    pub sample_period: Duration,
    /// Time of the first sample boundary, so samples are not aligned with the loop's ticks.
    pub sample_phase: Duration,
    /// Length of our kernels in [`LaunchShape::Bursts`], for the launch-overhead model.
    pub kernel: Duration,
    /// Length of our kernel in [`LaunchShape::OneInFlight`] (500 us, the launcher's
    /// default `beside_kernel`: 250 and 500 us cost a ResNet-50 request nothing beyond
    /// the noise on an H100, docs/benchmarks.md, "Beside a mostly-idle service"). It
    /// sets the launch overhead's share (30 us per 500 us kernel reads 47 % at 50 %
    /// duty), what a foreign request waits behind it ([`ForeignJob::loss_per_duty`]),
    /// and how long our last kernel runs after the load goes idle.
    pub one_in_flight_kernel: Duration,
    /// Busy time lost per kernel (launch overhead, sleep overshoot).
    pub launch_overhead: Duration,
    /// How long queued work keeps running after the load goes idle in
    /// [`LaunchShape::Bursts`] (in [`LaunchShape::OneInFlight`], at most one kernel).
    pub stop_tail: Duration,
    /// Number of SMs (132 on the H200).
    pub sm_count: u32,
    /// Whether an MPS server runs (kernels of different processes run together).
    pub mps: bool,
    /// Loss of a foreign job's progress per unit of our duty under MPS.
    pub mps_interference: f64,
    /// The foreign processes.
    pub foreign: Vec<ForeignJob>,
    /// Intervals `[from, to)` during which probe calls fail transiently.
    pub probe_faults: Vec<(Time, Time)>,
    /// From this time on the device is lost.
    pub lost_at: Option<Time>,
    /// When set, the lost device comes back at this time (a reset GPU, a reloaded
    /// driver): calls succeed again, and probes and load sources opened from then on work.
    pub recovers_at: Option<Time>,
    /// At each of these times the CUDA context in use breaks (a sticky launch error):
    /// load sources opened before it fail with a lost context from then on, sources
    /// opened later work.
    pub context_breaks: Vec<Time>,
    /// Which PIDs our probe sees. [`PidView::Namespace`]: the foreign jobs are missing
    /// from the process list, as inside a PID namespace of our own, while device memory,
    /// utilization and per-process samples (under their host PIDs) still show them.
    pub pid_view: PidView,
    /// The memory NVML lists for our own context (254 MiB with the stack limit at 0).
    pub own_context_bytes: u64,
    /// Device memory the driver holds per context besides its listed size (8 MiB on the
    /// H100).
    pub driver_per_context_bytes: u64,
    /// The driver's own memory moving, in time order: from each time on, this many bytes
    /// more (negative: fewer) than before. Empty: flat, as measured.
    pub driver_memory: Vec<(Time, i64)>,
    /// Whether the probe gets per-process memory sizes (without them the memory signal
    /// cannot work: [`Unlisted::Unknown`]).
    pub process_sizes: bool,
    /// How long after its publication a sample shows in the per-process samples (0 by
    /// default; on the H100 a new PID's first sample came 2.6 s after its work began,
    /// [`SimConfig::H100_PROCESS_SAMPLE_LAG`]).
    pub process_sample_lag: Duration,
    /// How long a foreign job must have run kernels without a break before the
    /// per-process samples show it (0 by default: at once). With
    /// [`SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN`] a service's short bursts never show,
    /// as on the H100.
    pub process_sample_min_run: Duration,
}

impl SimConfig {
    /// How late the H100's per-process samples showed a new PID's work, in both PID
    /// views (docs/data/ns-signals-h100.txt; docs/benchmarks.md, "Inside a PID namespace of its own").
    pub const H100_PROCESS_SAMPLE_LAG: Duration = Duration::from_millis(2600);

    /// How long a job's work went unseen by the per-process samples. On the H100 the
    /// ResNet-50 service's bursts (about 170 ms) never made gpufill yield in `activity`
    /// mode: they ended before its per-process samples showed them (docs/benchmarks.md,
    /// "Beside a mostly-idle service"); on the H200 steady work made it yield 580 to
    /// 1460 ms after the work began (docs/benchmarks.md, "`activity` mode"). Why NVML
    /// misses short bursts is not known; the simplest model that fits both is that a run
    /// shows only once it has lasted 400 ms (then at the next sample, read at most once
    /// per sample period: 400 to 650 ms after it began).
    pub const MEASURED_PROCESS_SAMPLE_MIN_RUN: Duration = Duration::from_millis(400);

    /// The view from inside a PID namespace of our own, as measured on the H100: foreign
    /// jobs unlisted, per-process samples [`SimConfig::H100_PROCESS_SAMPLE_LAG`] late.
    pub fn pid_namespace(self) -> Self {
        SimConfig {
            pid_view: PidView::Namespace,
            process_sample_lag: Self::H100_PROCESS_SAMPLE_LAG,
            ..self
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sample_period: Duration::from_millis(200),
            sample_phase: Duration::from_millis(73),
            kernel: Duration::from_millis(1),
            one_in_flight_kernel: Duration::from_micros(500),
            launch_overhead: Duration::from_micros(30),
            stop_tail: Duration::from_millis(10),
            sm_count: 132,
            mps: false,
            mps_interference: 0.015,
            foreign: Vec::new(),
            probe_faults: Vec::new(),
            lost_at: None,
            recovers_at: None,
            context_breaks: Vec::new(),
            pid_view: PidView::Host,
            own_context_bytes: 254 * MIB,
            driver_per_context_bytes: 8 * MIB,
            driver_memory: Vec::new(),
            process_sizes: true,
            process_sample_lag: Duration::ZERO,
            process_sample_min_run: Duration::ZERO,
        }
    }
}

/// What happened in the simulation so far.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// Per foreign job.
    pub foreign: Vec<ForeignReport>,
    /// Total time our kernels were resident.
    pub own_busy: Duration,
    /// Samples published so far.
    pub samples: u64,
}

/// An error of the simulated device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A configured transient probe fault.
    #[error("simulated probe fault")]
    Transient,
    /// The device is lost.
    #[error("simulated GPU lost")]
    Lost,
    /// The load source's context broke (a sticky launch error); a new one works.
    #[error("simulated CUDA context broken: launch failed")]
    ContextBroken,
}

impl DeviceError for SimError {
    fn kind(&self) -> ErrorKind {
        match self {
            SimError::Transient => ErrorKind::Transient,
            SimError::Lost | SimError::ContextBroken => ErrorKind::Lost,
        }
    }
}

/// The least load of a job working beside our one kernel in flight that holds that
/// kernel back past the launcher's 300 us (`LoadSource::others_seen`): a GPU-bound job
/// keeps the GPU for a whole time slice (about 2 ms on an H100). A CPU-bound service
/// (load 0.4 in a burst) delayed our kernels only 130-230 us there, which the launcher
/// does not report (docs/benchmarks.md, "Beside a mostly-idle service").
pub const HELD_BACK_LOAD: f64 = 0.8;

#[derive(Debug)]
struct Model {
    /// A kernel of ours was held back by a job's time slice since the last
    /// `others_seen` (see [`HELD_BACK_LOAD`]).
    held_back: bool,
    cfg: SimConfig,
    now: Time,
    own: f64,
    own_sm: f64,
    tail: Option<(Time, f64, f64)>,
    next_sample: Time,
    window_busy: f64,
    window_sm: f64,
    published: VecDeque<(f64, f64)>,
    /// Per foreign job, in the order of `cfg.foreign`.
    jobs: Vec<Tally>,
    own_busy: f64,
    samples: u64,
    requested: Load,
    /// How our kernels are laid out, as the loop last asked.
    shape: LaunchShape,
    /// Published per-process samples not yet visible (with `process_sample_lag`): when
    /// each shows, and the PIDs that worked in its window.
    pending_active: VecDeque<(Time, Vec<u32>)>,
    active: Vec<u32>,
    active_published: bool,
    holds_context: bool,
    /// The number of jobs in the configuration (never retired).
    configured: usize,
    /// Calls of `SimLoad::set_load`.
    load_calls: u64,
    /// The driver's memory moves so far (`driver_memory` up to `now`), and how many of
    /// them have been taken: the model's time only goes forward.
    driver_moved: i64,
    driver_taken: usize,
    /// The earliest job event after the time it was computed; `None` when unknown
    /// (see [`Model::next_job_event`]).
    next_job_event: Option<Time>,
}

impl Model {
    fn new(cfg: SimConfig) -> Self {
        let n = cfg.foreign.len();
        Model {
            held_back: false,
            next_sample: Time::from_duration(cfg.sample_phase),
            cfg,
            now: Time::ZERO,
            own: 0.0,
            own_sm: 0.0,
            tail: None,
            window_busy: 0.0,
            window_sm: 0.0,
            published: VecDeque::new(),
            jobs: vec![Tally::default(); n],
            own_busy: 0.0,
            samples: 0,
            requested: Load::IDLE,
            shape: LaunchShape::default(),
            pending_active: VecDeque::new(),
            active: Vec::new(),
            active_published: false,
            holds_context: true,
            configured: n,
            load_calls: 0,
            driver_moved: 0,
            driver_taken: 0,
            next_job_event: None,
        }
    }

    /// Our resident share and SM share at `t` (queued work finishing after a stop included).
    fn own_at(&self, t: Time) -> (f64, f64) {
        match self.tail {
            Some((until, duty, sm)) if t < until => (duty, sm),
            _ => (self.own, self.own_sm),
        }
    }

    /// The earliest time after `now` at which something changes.
    fn next_breakpoint(&mut self, limit: Time) -> Time {
        let mut next = limit.min(self.next_sample).min(self.next_job_event());
        if let Some((until, _, _)) = self.tail.filter(|&(until, _, _)| until > self.now) {
            next = next.min(until);
        }
        for &t in &self.cfg.context_breaks {
            if t > self.now {
                next = next.min(t);
            }
        }
        next
    }

    /// The earliest change of a foreign job after `now`. Cached: between two job events
    /// only samples come (five a second), and a scan of every job at each would make a
    /// long run with many jobs around cost jobs x samples. The cache holds while `now`
    /// has not reached it and no job was added or retired.
    fn next_job_event(&mut self) -> Time {
        if let Some(at) = self.next_job_event.filter(|&at| at > self.now) {
            return at;
        }
        let next = self
            .cfg
            .foreign
            .iter()
            .filter_map(|job| job.next_event(self.now))
            .min()
            .unwrap_or(Time::MAX);
        self.next_job_event = Some(next);
        next
    }

    fn advance(&mut self, to: Time) {
        while self.now < to {
            let next = self.next_breakpoint(to);
            self.integrate(next - self.now);
            self.now = next;
            if self.cfg.context_breaks.contains(&self.now) {
                // The context in use stops running kernels; `requested` keeps what was asked.
                let requested = self.requested;
                self.set_load(Load::IDLE);
                self.requested = requested;
            }
            if self.now >= self.next_sample {
                self.publish();
            }
        }
        self.show_active();
        while let Some(&(at, bytes)) = self.cfg.driver_memory.get(self.driver_taken) {
            if at > self.now {
                break;
            }
            self.driver_moved += bytes;
            self.driver_taken += 1;
        }
    }

    /// Integrates `[now, now + dt)`, over which nothing changes.
    fn integrate(&mut self, span: Duration) {
        let dt = span.as_secs_f64();
        let (own, own_sm) = self.own_at(self.now);
        let mut idle = 1.0 - own;
        let mut sm = own_sm;
        let mut time_sliced = own;
        let mut all_beside = true;
        for (job, tally) in self.cfg.foreign.iter().zip(&mut self.jobs) {
            if !job.running(self.now) {
                tally.stopped();
                continue;
            }
            let beside = self.cfg.mps && !job.outside_mps;
            all_beside &= beside;
            if !beside
                && self.shape == LaunchShape::OneInFlight
                && own > 0.0
                && job.load >= HELD_BACK_LOAD
                && dt > 0.0
            {
                self.held_back = true;
            }
            let loss = if beside {
                self.cfg.mps_interference
            } else {
                job.loss_per_duty(self.shape, self.cfg.one_in_flight_kernel)
            };
            let progress = job.load * (1.0 - loss * own).max(0.0);
            tally.ran(&Ran {
                at: self.now,
                dt: span,
                wanted: job.load,
                progress,
                own,
                shape: self.shape,
                min_run: self.cfg.process_sample_min_run,
            });
            idle *= 1.0 - progress;
            time_sliced += progress;
            sm += progress * job.sm_share;
        }
        // Without MPS contexts take turns, so busy shares add up; with MPS they overlap
        // (a process outside MPS takes turns with everyone).
        let busy = if self.cfg.mps && all_beside {
            1.0 - idle
        } else {
            time_sliced.min(1.0)
        };
        self.window_busy += busy * dt;
        self.window_sm += sm.min(1.0) * dt;
        self.own_busy += own * dt;
    }

    fn publish(&mut self) {
        let period = self.cfg.sample_period.as_secs_f64();
        // NVML reports whole percents.
        let util = (self.window_busy / period * 100.0).round() / 100.0;
        let sm = (self.window_sm / period * 100.0).round() / 100.0;
        self.published.push_back((util, sm));
        let mut worked = Vec::new();
        for (job, tally) in self.cfg.foreign.iter().zip(&mut self.jobs) {
            if std::mem::take(&mut tally.window_active) {
                worked.push(job.pid);
            }
        }
        let visible = self.now + self.cfg.process_sample_lag;
        self.pending_active.push_back((visible, worked));
        self.show_active();
        self.samples += 1;
        self.window_busy = 0.0;
        self.window_sm = 0.0;
        self.next_sample += self.cfg.sample_period;
    }

    /// Moves the per-process samples that have become visible into `active`.
    fn show_active(&mut self) {
        while self
            .pending_active
            .front()
            .is_some_and(|&(visible, _)| visible <= self.now)
        {
            if let Some((_, pids)) = self.pending_active.pop_front() {
                for pid in pids {
                    if !self.active.contains(&pid) {
                        self.active.push(pid);
                    }
                }
                self.active_published = true;
            }
        }
    }

    /// Device memory in use at the model's time (NVML's v2 `used`): our context while
    /// we hold one, each foreign job's, and the driver's own moves.
    fn used_memory(&self) -> u64 {
        let driver = self.cfg.driver_per_context_bytes;
        let own = if self.holds_context {
            self.cfg.own_context_bytes + driver
        } else {
            0
        };
        let foreign: u64 = self
            .cfg
            .foreign
            .iter()
            .map(|job| job.memory_at(self.now, driver))
            .sum();
        (own + foreign).saturating_add_signed(self.driver_moved)
    }

    /// What our probe reads of device memory against its list (our own context only:
    /// the foreign jobs are never in our namespace).
    fn memory_reading(&self) -> MemoryReading {
        let (listed, contexts) = if self.holds_context {
            (self.cfg.own_context_bytes, 1)
        } else {
            (0, 0)
        };
        MemoryReading {
            used_bytes: self.used_memory(),
            listed_bytes: self.cfg.process_sizes.then_some(listed),
            listed_contexts: contexts,
        }
    }

    fn lost(&self) -> bool {
        self.cfg.lost_at.is_some_and(|t| self.now >= t)
            && self.cfg.recovers_at.is_none_or(|t| self.now < t)
    }

    fn check(&self, probing: bool) -> Result<(), SimError> {
        if self.lost() {
            return Err(SimError::Lost);
        }
        let faulty = self
            .cfg
            .probe_faults
            .iter()
            .any(|&(from, to)| from <= self.now && self.now < to);
        if probing && faulty {
            return Err(SimError::Transient);
        }
        Ok(())
    }

    /// The share of its duty our load is resident in `shape`: each kernel loses the
    /// launch overhead.
    fn efficiency(&self, shape: LaunchShape) -> f64 {
        let kernel = match shape {
            LaunchShape::Bursts => self.cfg.kernel,
            LaunchShape::OneInFlight => self.cfg.one_in_flight_kernel,
        };
        let lost = self.cfg.launch_overhead.as_secs_f64() / kernel.as_secs_f64().max(1e-9);
        (1.0 - lost).clamp(0.0, 1.0)
    }

    /// Lays our load out in `shape` from now on: the same duty, resident for the new
    /// shape's share of it.
    fn set_shape(&mut self, shape: LaunchShape) {
        let (before, after) = (self.efficiency(self.shape), self.efficiency(shape));
        self.shape = shape;
        // Scaled rather than recomputed from `requested`, which a broken context keeps
        // while running nothing.
        let ratio = if before > 0.0 { after / before } else { 0.0 };
        self.own *= ratio;
        self.own_sm *= ratio;
    }

    fn set_load(&mut self, load: Load) {
        self.requested = load;
        let duty = load.duty.fraction() * self.efficiency(self.shape);
        let width = f64::from(load.width.get().min(self.cfg.sm_count));
        let sm = duty * width / f64::from(self.cfg.sm_count.max(1));
        if duty == 0.0 && self.own > 0.0 {
            let tail = match self.shape {
                LaunchShape::Bursts => self.cfg.stop_tail,
                // Nothing is queued behind the kernel in flight.
                LaunchShape::OneInFlight => self.cfg.stop_tail.min(self.cfg.one_in_flight_kernel),
            };
            self.tail = Some((self.now + tail, self.own, self.own_sm));
        } else if duty > 0.0 {
            self.tail = None;
        }
        self.own = duty;
        self.own_sm = sm;
    }

    fn report(&self) -> SimReport {
        let foreign = self
            .cfg
            .foreign
            .iter()
            .zip(&self.jobs)
            .map(|(job, tally)| tally.report(job.pid))
            .collect();
        SimReport {
            foreign,
            own_busy: Duration::from_secs_f64(self.own_busy),
            samples: self.samples,
        }
    }
}

/// The simulated GPU. Clone handles share one device.
#[derive(Clone, Debug)]
pub struct SimGpu {
    model: Arc<Mutex<Model>>,
}

impl SimGpu {
    /// A simulated GPU at time zero.
    pub fn new(cfg: SimConfig) -> Self {
        SimGpu {
            model: Arc::new(Mutex::new(Model::new(cfg))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // A panic while holding the lock leaves plain numbers behind: still usable.
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A probe on this GPU.
    pub fn probe(&self) -> SimProbe {
        SimProbe {
            gpu: self.clone(),
            sm_metric: false,
            memory: UnexplainedMemory::new(),
        }
    }

    /// A probe that reads SM activity instead of utilization (the `sm` metric).
    pub fn sm_probe(&self) -> SimProbe {
        SimProbe {
            gpu: self.clone(),
            sm_metric: true,
            memory: UnexplainedMemory::new(),
        }
    }

    /// A load source on this GPU (a fresh context, opened at the model's current time).
    pub fn load(&self) -> SimLoad {
        let opened_at = self.lock().now;
        SimLoad {
            gpu: self.clone(),
            opened_at,
        }
    }

    /// Opens a probe and a load source at `now`, as a real adapter opens NVML and a CUDA
    /// context: fails while the device is lost.
    ///
    /// # Errors
    /// [`SimError::Lost`] while the device is lost.
    pub fn open(&self, now: Time) -> Result<(SimProbe, SimLoad), SimError> {
        {
            let mut m = self.lock();
            m.advance(now);
            m.check(false)?;
        }
        Ok((self.probe(), self.load()))
    }

    /// How many times a load source of this GPU was asked to change the load (the
    /// loop's work on the device side, for churn tests).
    pub fn load_calls(&self) -> u64 {
        self.lock().load_calls
    }

    /// How many foreign jobs are listed at `t` (the model must have reached `t`).
    pub fn listed_count(&self, t: Time) -> usize {
        self.lock()
            .cfg
            .foreign
            .iter()
            .filter(|j| j.listed(t))
            .count()
    }

    /// How many foreign jobs the model keeps (grows with arrivals until retired).
    pub fn foreign_len(&self) -> usize {
        self.lock().cfg.foreign.len()
    }

    /// How many PIDs seen working the model keeps for the next
    /// [`Probe::active_processes`] read (only the `activity` policy reads them).
    pub fn pending_active_len(&self) -> usize {
        self.lock().active.len()
    }

    /// Runs the simulation up to `t` and reports.
    pub fn report(&self, t: Time) -> SimReport {
        let mut m = self.lock();
        m.advance(t);
        m.report()
    }

    /// Whether our process holds a context on the device (false after a release until
    /// the next non-idle load).
    pub fn holds_context(&self) -> bool {
        self.lock().holds_context
    }

    /// The load most recently asked for.
    pub fn requested_load(&self) -> Load {
        self.lock().requested
    }

    /// How our kernels are laid out, as a load source of this GPU was last told
    /// ([`LoadSource::set_shape`]).
    pub fn shape(&self) -> LaunchShape {
        self.lock().shape
    }

    /// Adds a foreign job (for scenarios built as they go, such as long random runs).
    pub fn add_foreign(&self, job: ForeignJob) {
        let mut m = self.lock();
        m.cfg.foreign.push(job);
        m.next_job_event = None;
        m.jobs.push(Tally::default());
    }

    /// Drops foreign jobs added with [`SimGpu::add_foreign`] that left before `t`,
    /// keeping memory bounded in long runs; the jobs of the [`SimConfig`] stay, so
    /// their reports remain in [`SimGpu::report`]. The dropped jobs' reports are returned.
    pub fn retire_foreign(&self, t: Time) -> Vec<ForeignReport> {
        let mut m = self.lock();
        m.advance(t);
        let mut retired = Vec::new();
        let mut i = m.configured;
        while i < m.cfg.foreign.len() {
            if m.cfg.foreign[i].leaves_at < t {
                let job = m.cfg.foreign.remove(i);
                m.next_job_event = None;
                // A PID seen working stays pending until the `activity` policy reads
                // it; nothing reads it in `presence` mode, so a retired job takes its
                // PID along, or the list (searched at every sample) grows with every
                // job of the run.
                m.active.retain(|&pid| pid != job.pid);
                let tally = m.jobs.remove(i);
                retired.push(tally.report(job.pid));
            } else {
                i += 1;
            }
        }
        retired
    }
}

/// The simulated GPU's [`Probe`].
#[derive(Clone, Debug)]
pub struct SimProbe {
    gpu: SimGpu,
    sm_metric: bool,
    /// The baseline learner, as the NVML probe keeps one (namespace view only).
    memory: UnexplainedMemory,
}

impl Probe for SimProbe {
    type Error = SimError;

    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        let n = m.published.len();
        if n == 0 {
            return Ok(None);
        }
        let pick = |s: &(f64, f64)| if self.sm_metric { s.1 } else { s.0 };
        let mean = m.published.iter().map(pick).sum::<f64>() / n as f64;
        m.published.clear();
        Ok(Some(Utilization::saturating_from_fraction(mean)))
    }

    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if m.cfg.pid_view == PidView::Namespace {
            // NVML lists only our namespace's processes: ours, which are not foreign.
            return Ok(Vec::new());
        }
        Ok(m.cfg
            .foreign
            .iter()
            .filter(|job| job.listed(now))
            .map(|job| ProcessInfo {
                pid: job.pid,
                used_memory_bytes: m.cfg.process_sizes.then_some(job.memory_at(now, 0)),
                name: job.name.clone(),
                mps_client: m.cfg.mps && !job.outside_mps,
            })
            .collect())
    }

    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if !std::mem::take(&mut m.active_published) {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut m.active)))
    }

    /// In the namespace view, device memory against our own context, through the same
    /// [`UnexplainedMemory`] the NVML probe uses.
    fn unlisted(&mut self, now: Time) -> Result<Unlisted, SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(true)?;
        if m.cfg.pid_view == PidView::Host {
            return Ok(Unlisted::ListComplete);
        }
        let reading = m.memory_reading();
        drop(m);
        Ok(self.memory.observe(now, Some(reading)))
    }
}

/// The simulated GPU's [`LoadSource`].
#[derive(Clone, Debug)]
pub struct SimLoad {
    gpu: SimGpu,
    opened_at: Time,
}

impl LoadSource for SimLoad {
    type Error = SimError;

    fn set_load(&mut self, now: Time, load: Load) -> Result<(), SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.load_calls += 1;
        // A lost device runs nothing whatever it is asked, so the load is recorded
        // (for tests to see what the loop asked for) before the error.
        m.set_load(load);
        if !load.is_idle() {
            m.holds_context = true;
        }
        m.check(false)?;
        let opened_at = self.opened_at;
        if m.cfg
            .context_breaks
            .iter()
            .any(|&t| opened_at < t && t <= m.now)
        {
            // A broken context runs nothing.
            m.set_load(Load::IDLE);
            return Err(SimError::ContextBroken);
        }
        Ok(())
    }

    /// Recorded for the model's costs: our later kernels are laid out in `shape`. The
    /// loop calls it in the step that read the probe at the same time, so the model
    /// is already there.
    fn set_shape(&mut self, shape: LaunchShape) {
        self.gpu.lock().set_shape(shape);
    }

    /// Whether a job of load `HELD_BACK_LOAD` (0.8) or more worked beside our one kernel in
    /// flight since the last call (the model as of the probe's last reading).
    fn others_seen(&mut self) -> bool {
        std::mem::take(&mut self.gpu.lock().held_back)
    }

    fn release(&mut self, now: Time) -> Result<(), SimError> {
        let mut m = self.gpu.lock();
        m.advance(now);
        m.check(false)?;
        m.holds_context = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{Duty, Width};

    fn load(duty: f64) -> Load {
        Load {
            duty: Duty::clamped(duty),
            width: Width::ONE_WARP,
        }
    }

    /// The samples published in `(from_ms, to_ms]`, read every 10 ms.
    fn samples_between(gpu: &SimGpu, from_ms: u64, to_ms: u64) -> Vec<f64> {
        let mut probe = gpu.probe();
        probe.utilization(Time::from_millis(from_ms)).unwrap();
        let mut out = Vec::new();
        for ms in (from_ms + 10..=to_ms).step_by(10) {
            if let Some(u) = probe.utilization(Time::from_millis(ms)).unwrap() {
                out.push(u.percent());
            }
        }
        out
    }

    #[test]
    fn open_loop_duty_reads_as_measured_with_one_ms_kernels() {
        for (duty, expect) in [(0.5, 48.5), (0.25, 24.0), (0.75, 73.0)] {
            let gpu = SimGpu::new(SimConfig::default());
            gpu.load().set_load(Time::ZERO, load(duty)).unwrap();
            let s = samples_between(&gpu, 300, 2000);
            assert_eq!(s.len(), 8);
            for v in s {
                assert!((v - expect).abs() <= 1.0, "duty {duty}: {v}");
            }
        }
    }

    #[test]
    fn publishes_one_sample_per_period() {
        let gpu = SimGpu::new(SimConfig::default());
        // Boundaries at 73, 273, ..., 1873 ms: ten of them in the first 2 s.
        assert_eq!(samples_between(&gpu, 0, 2000).len(), 10);
        assert_eq!(samples_between(&gpu, 2000, 2200).len(), 1);
    }

    #[test]
    fn compute_bound_job_loses_a_fifth_beside_a_half_duty_filler() {
        let cfg = SimConfig {
            foreign: vec![ForeignJob {
                first_kernel_after: Duration::ZERO,
                ..ForeignJob::compute_bound(0.0, 10.0, 1.0)
            }],
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        };
        let gpu = SimGpu::new(cfg);
        gpu.load().set_load(Time::ZERO, load(0.5)).unwrap();
        let r = gpu.report(Time::from_millis(10_000));
        assert!((r.foreign[0].slowdown - 0.21).abs() < 0.005, "{r:?}");
        assert!((r.foreign[0].overlap.as_secs_f64() - 5.0).abs() < 1e-6);
    }

    #[test]
    fn mps_costs_the_foreign_job_little_and_utilization_is_the_union() {
        let cfg = SimConfig {
            mps: true,
            foreign: vec![ForeignJob::compute_bound(0.0, 10.0, 0.5)],
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        };
        let gpu = SimGpu::new(cfg);
        gpu.load().set_load(Time::ZERO, load(1.0)).unwrap();
        let r = gpu.report(Time::from_millis(10_000));
        assert!(r.foreign[0].slowdown < 0.02, "{r:?}");
        let s = samples_between(&gpu, 10_000, 10_400);
        assert!(s.iter().all(|&v| v == 100.0), "{s:?}");
    }

    #[test]
    fn queued_work_runs_for_the_stop_tail_after_idling() {
        let gpu = SimGpu::new(SimConfig {
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        });
        gpu.load().set_load(Time::ZERO, load(1.0)).unwrap();
        gpu.load()
            .set_load(Time::from_millis(1000), Load::IDLE)
            .unwrap();
        let r = gpu.report(Time::from_millis(3000));
        assert!((r.own_busy.as_secs_f64() - 1.010).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn probe_faults_and_loss_surface_as_classified_errors() {
        let gpu = SimGpu::new(SimConfig {
            probe_faults: vec![(Time::from_millis(100), Time::from_millis(200))],
            lost_at: Some(Time::from_millis(500)),
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        assert!(p.foreign_processes(Time::from_millis(50)).is_ok());
        let e = p.foreign_processes(Time::from_millis(150)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transient);
        assert!(p.utilization(Time::from_millis(250)).is_ok());
        let e = gpu
            .load()
            .set_load(Time::from_millis(600), load(0.5))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Lost);
    }

    #[test]
    fn lists_a_job_from_its_listing_until_it_leaves() {
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![ForeignJob::compute_bound(1.0, 2.0, 0.3)],
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        assert!(
            p.foreign_processes(Time::from_millis(999))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            p.foreign_processes(Time::from_millis(1000)).unwrap().len(),
            1
        );
        assert!(
            p.foreign_processes(Time::from_millis(2000))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn sm_activity_scales_with_width() {
        let gpu = SimGpu::new(SimConfig {
            launch_overhead: Duration::ZERO,
            ..SimConfig::default()
        });
        let wide = Load {
            duty: Duty::FULL,
            width: Width::blocks(66).unwrap(),
        };
        gpu.load().set_load(Time::ZERO, wide).unwrap();
        let mut p = gpu.sm_probe();
        p.utilization(Time::from_millis(300)).unwrap();
        let u = p.utilization(Time::from_millis(500)).unwrap().unwrap();
        assert!((u.percent() - 50.0).abs() < 0.6, "{u}");
    }

    #[test]
    fn a_newcomers_memory_grows_as_it_did_on_the_h100() {
        // Listed (host view) at 6.148 s, context ready 166 ms later; used_v2 minus our
        // 262 MiB, from docs/data/ns-signals-h100.txt.
        let job = ForeignJob {
            first_kernel_after: Duration::from_millis(166),
            ..ForeignJob::compute_bound(6.148, 14.0, 1.0)
        };
        let driver = 8 * MIB;
        let mib_at = |t: f64| job.memory_at(Time::from_secs_f64(t), driver) / MIB;
        assert_eq!(mib_at(6.100), 0);
        assert_eq!(mib_at(6.1125), 8);
        assert_eq!(mib_at(6.1245), 19);
        assert_eq!(mib_at(6.2425), 36);
        assert_eq!(mib_at(6.2695), 110);
        assert_eq!(mib_at(6.2825), 526);
        assert_eq!(mib_at(6.315), 620);
        assert_eq!(mib_at(14.0), 0);
    }

    #[test]
    fn the_namespace_view_shows_memory_beyond_our_context_and_late_samples() {
        let job = ForeignJob::compute_bound(1.0, 10.0, 1.0);
        let gpu = SimGpu::new(
            SimConfig {
                foreign: vec![job],
                ..SimConfig::default()
            }
            .pid_namespace(),
        );
        let mut p = gpu.probe();
        assert_eq!(p.unlisted(Time::from_millis(500)), Ok(Unlisted::Explained));
        assert!(
            p.foreign_processes(Time::from_millis(2000))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            p.unlisted(Time::from_millis(2000)),
            Ok(Unlisted::Memory(620 * MIB))
        );
        // It worked from 1.085 s; the first window showing it closed at 1.273 s and
        // shows in the per-process samples 2.6 s later.
        p.active_processes(Time::from_millis(3800)).unwrap();
        assert_eq!(p.active_processes(Time::from_millis(3860)), Ok(None));
        assert_eq!(
            p.active_processes(Time::from_millis(3880)),
            Ok(Some(vec![2000]))
        );
        // The host view lists it and has nothing to add.
        let host = SimGpu::new(SimConfig {
            foreign: vec![ForeignJob::compute_bound(1.0, 10.0, 1.0)],
            ..SimConfig::default()
        });
        let mut h = host.probe();
        assert_eq!(
            h.foreign_processes(Time::from_millis(2000)).unwrap().len(),
            1
        );
        assert_eq!(
            h.unlisted(Time::from_millis(2000)),
            Ok(Unlisted::ListComplete)
        );
    }

    #[test]
    fn retiring_finished_jobs_returns_their_reports() {
        let gpu = SimGpu::new(SimConfig::default());
        gpu.add_foreign(ForeignJob::compute_bound(0.0, 1.0, 1.0));
        gpu.add_foreign(ForeignJob::compute_bound(0.5, 5.0, 1.0));
        let retired = gpu.retire_foreign(Time::from_millis(2000));
        assert_eq!(retired.len(), 1);
        assert_eq!(retired[0].pid, 1000);
        assert_eq!(gpu.report(Time::from_millis(2000)).foreign.len(), 1);
    }

    /// One long burst of a service at `load`, from 0 to 10 s, with no launch overhead
    /// unless `overhead`.
    fn service_gpu(load: f64, overhead: bool) -> SimGpu {
        let job = ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::service(
                0.0,
                10.0,
                Duration::from_secs(20),
                Duration::from_secs(10),
                load,
            )
        };
        SimGpu::new(SimConfig {
            foreign: vec![job],
            launch_overhead: if overhead {
                Duration::from_micros(30)
            } else {
                Duration::ZERO
            },
            ..SimConfig::default()
        })
    }

    #[test]
    fn one_kernel_in_flight_costs_a_service_less_than_queued_bursts() {
        let bursts = service_gpu(0.4, false);
        bursts.load().set_load(Time::ZERO, load(0.5)).unwrap();
        let r = bursts.report(Time::from_millis(10_000)).foreign[0].clone();
        assert!((r.slowdown - 0.15).abs() < 1e-6, "{r:?}");
        assert_eq!(r.overlap_one_in_flight, Duration::ZERO);

        let one = service_gpu(0.4, false);
        let mut source = one.load();
        source.set_shape(LaunchShape::OneInFlight);
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let r = one.report(Time::from_millis(10_000)).foreign[0].clone();
        // 500 us kernels against 5.59 ms requests, two waits a request: 8.9 % of the
        // time it overlaps (at most `interference`, 0.3 per unit of duty: 15 %).
        assert!((r.slowdown - 0.0894).abs() < 1e-3, "{r:?}");
        assert!((r.worst_run - r.slowdown).abs() < 1e-9, "one burst: {r:?}");
        assert_eq!(r.overlap, r.overlap_one_in_flight);
        assert_eq!(one.shape(), LaunchShape::OneInFlight);
    }

    #[test]
    fn one_short_kernel_at_a_time_reads_lower_and_stops_at_once() {
        let gpu = SimGpu::new(SimConfig::default());
        let mut source = gpu.load();
        source.set_load(Time::ZERO, load(0.5)).unwrap();
        let s = samples_between(&gpu, 300, 1000);
        assert!(s.iter().all(|&v| (48.0..=49.0).contains(&v)), "{s:?}");
        // 30 us lost per 500 us kernel: 47 %.
        source.set_shape(LaunchShape::OneInFlight);
        let s = samples_between(&gpu, 1300, 2000);
        assert!(s.iter().all(|&v| v == 47.0), "{s:?}");
        let busy = gpu.report(Time::from_millis(3000)).own_busy;
        source
            .set_load(Time::from_millis(3000), Load::IDLE)
            .unwrap();
        let after = gpu.report(Time::from_millis(4000)).own_busy;
        // The kernel in flight finishes; nothing is queued behind it.
        assert!((after - busy).as_secs_f64() < 0.000_5, "{busy:?} {after:?}");
    }

    #[test]
    fn with_the_measured_min_run_short_bursts_never_show_in_per_process_samples() {
        let job = |start: f64| ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::service(
                start,
                start + 10.0,
                Duration::from_secs(2),
                Duration::from_millis(170),
                0.4,
            )
        };
        let notebook = ForeignJob {
            first_kernel_after: Duration::ZERO,
            ..ForeignJob::notebook(0.0, 10.0, &[(5.0, 7.0)])
        };
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![job(0.0), notebook],
            process_sample_min_run: SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN,
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        let mut seen = Vec::new();
        for ms in (0..7000).step_by(10) {
            if let Some(pids) = p.active_processes(Time::from_millis(ms)).unwrap()
                && !pids.is_empty()
            {
                seen.push((ms, pids));
            }
        }
        // Only the notebook's cell, 400 ms into it, at the next sample (5.473 s).
        assert_eq!(seen.first(), Some(&(5480, vec![1000])), "{seen:?}");
        assert!(seen.iter().all(|(_, pids)| pids == &vec![1000]));
        // Without the min run, every burst shows.
        let gpu = SimGpu::new(SimConfig {
            foreign: vec![job(0.0)],
            ..SimConfig::default()
        });
        let mut p = gpu.probe();
        let shown = (0..7000)
            .step_by(10)
            .filter_map(|ms| p.active_processes(Time::from_millis(ms)).unwrap())
            .filter(|pids| !pids.is_empty())
            .count();
        assert!(shown >= 4, "{shown}");
    }
}
