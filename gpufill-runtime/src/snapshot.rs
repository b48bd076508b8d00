//! Per-GPU snapshots: what each worker last did, for whoever watches (a metrics
//! endpoint, `gpufill run`'s health check, an embedder's own dashboard).
//!
//! A worker owns a [`Publisher`]: it counts events and copies its latest values into a
//! shared [`GpuSnapshot`] with `try_lock`, so a reader never makes a fill loop wait
//! (that tick's copy is skipped; counters live in the publisher, so nothing is lost).
//! Readers ([`Registry::snapshots`]) lock each snapshot only long enough to clone it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use gpufill_core::{Event, LaunchShape, State, Tick};

/// The labels dcgm-exporter puts on per-GPU series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuLabels {
    /// NVML index (`gpu`).
    pub index: u32,
    /// UUID (`UUID`).
    pub uuid: String,
    /// Product name (`modelName`).
    pub model: String,
}

/// What is known of one GPU's loop, as last published.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSnapshot {
    /// Which GPU (shared, so that publishing a snapshot every tick allocates nothing).
    pub labels: Arc<GpuLabels>,
    /// Target, percent.
    pub target_percent: f64,
    /// Last measured value of the controlled metric, percent; `None` when unknown.
    pub util_percent: Option<f64>,
    /// Whether that metric is GPM SM activity (`metric = "sm"`) rather than NVML
    /// utilization: it is then published as `gpufill_sm_activity_percent`.
    pub sm_metric: bool,
    /// Our own time share, 0 to 1.
    pub duty_ratio: f64,
    /// Blocks per kernel.
    pub width_blocks: u32,
    /// The loop's state; `None` before the first tick.
    pub state: Option<State>,
    /// Foreign processes that cause a yield now.
    pub foreign: usize,
    /// `Yielded` events so far.
    pub yields_total: u64,
    /// `Paused` events so far: bursts of quiet holders seen in the utilization.
    pub pauses_total: u64,
    /// `Unexplained` events so far: signs of our kernels' timing with nobody else
    /// possible on the GPU (the host's own jitter), which nothing pauses for.
    pub unexplained_signs_total: u64,
    /// Filling beside quiet holders of a context, one short kernel in flight at a time.
    pub filling_beside: bool,
    /// Filling the gaps of live work (`yield.beside_live = "fill_gaps"`).
    pub filling_gaps: bool,
    /// While filling gaps: the estimated cost to the live work, a ratio.
    pub estimated_cost_ratio: Option<f64>,
    /// Probe faults so far.
    pub probe_faults_total: u64,
    /// gpufill's own GPU memory, bytes, when known.
    pub memory_used_bytes: Option<u64>,
    /// Board power, watts, when known.
    pub power_watts: Option<f64>,
    /// Load faults so far (a launch or a context that failed).
    pub load_faults_total: u64,
    /// Wall-clock time of the last tick, for `gpufill_last_tick_timestamp_seconds`;
    /// `None` before the first. Health is judged on [`GpuSnapshot::last_tick_at`].
    pub last_tick: Option<SystemTime>,
    /// Monotonic time of the last tick, on which staleness is judged (a step of the
    /// wall clock neither hides a stall nor makes one); `None` before the first.
    pub last_tick_at: Option<Instant>,
    /// When the worker was set up (its publisher made): its [`STARTUP_ALLOWANCE`] for a
    /// first tick runs from here.
    pub started: Instant,
    /// Whether the worker is running: false once it has ended (stopped, failed or
    /// panicked), whatever its last tick said.
    pub worker_running: bool,
    /// How long the worker may go without a tick before it counts as stalled
    /// ([`stall_after`] of its tick).
    pub stall_after: Duration,
    /// While the worker waits for the GPU's lock, which something other than a gpufill
    /// holds ([`crate::Claimed::Waiting`]): who holds it, in words. `None` once claimed
    /// (its [`STARTUP_ALLOWANCE`] runs from then), and for a GPU that never waited.
    pub waiting_for: Option<String>,
}

/// How long a worker may take to its first tick (opening NVML and a CUDA context)
/// before it counts as stalled rather than starting. Opening a context takes a small
/// fraction of a second (docs/benchmarks.md#hardware-tests-run-b); this leaves room
/// for a driver that initialises slowly without persistence mode, and stays below the
/// systemd unit's `TimeoutStartSec` (60 s). Until its first tick a worker is not healthy
/// either way: it is only logged as stalled after this long.
pub const STARTUP_ALLOWANCE: Duration = Duration::from_secs(30);

/// What a worker's snapshot says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs and has ticked within its stall limit: healthy.
    Ticking,
    /// It runs but has not ticked yet, within its [`STARTUP_ALLOWANCE`]: not yet healthy.
    Starting,
    /// It waits for its GPU's lock, which something other than a gpufill holds
    /// ([`GpuSnapshot::waiting_for`]): not filling, but not failing either (a restart
    /// would not free the lock), so healthy.
    Waiting,
    /// Not healthy, and why: it ended, stopped ticking, or never ticked within its
    /// allowance (a first CUDA or NVML call that hangs).
    Down(String),
}

impl GpuSnapshot {
    /// The snapshot of a GPU whose worker has not ticked yet.
    pub fn new(labels: GpuLabels) -> Self {
        GpuSnapshot {
            labels: Arc::new(labels),
            target_percent: f64::NAN,
            util_percent: None,
            sm_metric: false,
            duty_ratio: 0.0,
            width_blocks: 0,
            state: None,
            foreign: 0,
            yields_total: 0,
            pauses_total: 0,
            unexplained_signs_total: 0,
            filling_beside: false,
            filling_gaps: false,
            estimated_cost_ratio: None,
            probe_faults_total: 0,
            memory_used_bytes: None,
            power_watts: None,
            load_faults_total: 0,
            last_tick: None,
            last_tick_at: None,
            started: Instant::now(),
            worker_running: true,
            stall_after: stall_after(Duration::ZERO),
            waiting_for: None,
        }
    }
}

impl GpuSnapshot {
    /// What this snapshot says of its worker at `now` (monotonic): ticking within its
    /// `stall_after`, starting (no tick yet, within [`STARTUP_ALLOWANCE`] of
    /// `started`), or down. A worker that stopped ticking (a driver call that hangs, a
    /// deadlock) shows here within `stall_after`, whatever its last tick said.
    pub fn liveness(&self, now: Instant) -> Liveness {
        if !self.worker_running {
            return Liveness::Down("worker ended".to_owned());
        }
        if self.waiting_for.is_some() {
            return Liveness::Waiting;
        }
        match self.last_tick_at {
            None => {
                let waited = now.saturating_duration_since(self.started);
                if waited > STARTUP_ALLOWANCE {
                    Liveness::Down(format!("no first tick after {:.1} s", waited.as_secs_f64()))
                } else {
                    Liveness::Starting
                }
            }
            Some(at) => {
                let since = now.saturating_duration_since(at);
                if since > self.stall_after {
                    Liveness::Down(format!("no tick for {:.1} s", since.as_secs_f64()))
                } else {
                    Liveness::Ticking
                }
            }
        }
    }

    /// Why this GPU's worker is not healthy at `now`, or `None` when it is: healthy
    /// means running and ticking ([`GpuSnapshot::liveness`]); a worker that has not
    /// ticked yet is not (`starting: no tick yet`); one that waits for its GPU's lock is.
    pub fn unhealthy(&self, now: Instant) -> Option<String> {
        match self.liveness(now) {
            Liveness::Ticking | Liveness::Waiting => None,
            Liveness::Starting => Some("starting: no tick yet".to_owned()),
            Liveness::Down(why) => Some(why),
        }
    }
}

/// The workers that are down among `lives` ([`Registry::liveness`]), with why.
pub fn down_of(lives: Vec<(u32, Liveness)>) -> Vec<(u32, String)> {
    lives
        .into_iter()
        .filter_map(|(index, l)| match l {
            Liveness::Down(why) => Some((index, why)),
            _ => None,
        })
        .collect()
}

/// How long a worker may go without a tick before it counts as stalled: ten ticks, and
/// at least 5 s (opening a CUDA context takes a small fraction of that:
/// docs/benchmarks.md#hardware-tests-run-b; and a reopen after a lost GPU ticks on, so only a
/// real hang reaches it).
pub fn stall_after(tick: Duration) -> Duration {
    (tick * 10).max(Duration::from_secs(5))
}

/// Every GPU's shared snapshot, for readers.
#[derive(Debug)]
pub struct Registry {
    gpus: Vec<Arc<Mutex<GpuSnapshot>>>,
}

impl Registry {
    /// A registry for these GPUs, and one publisher per GPU (in the same order).
    pub fn new(gpus: Vec<GpuLabels>) -> (Arc<Registry>, Vec<Publisher>) {
        let shared: Vec<_> = gpus
            .into_iter()
            .map(|labels| Arc::new(Mutex::new(GpuSnapshot::new(labels))))
            .collect();
        let publishers = shared
            .iter()
            .map(|s| Publisher {
                local: s.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                shared: Arc::clone(s),
            })
            .collect();
        (Arc::new(Registry { gpus: shared }), publishers)
    }

    /// Marks the worker of the GPU at `slot` (the order given to [`Registry::new`]) as
    /// ended: its snapshot says so from now on, whatever it published last.
    pub fn mark_ended(&self, slot: usize) {
        if let Some(shared) = self.gpus.get(slot) {
            shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .worker_running = false;
        }
    }

    /// Says that the worker of the GPU at `slot` waits for the GPU's lock, which `holder`
    /// holds; or, with `None`, that it has it, and starts now (its
    /// [`STARTUP_ALLOWANCE`] runs from here). Waits for the snapshot's lock: this is no
    /// fill loop's tick.
    pub(crate) fn set_waiting(&self, slot: usize, holder: Option<String>) {
        if let Some(shared) = self.gpus.get(slot) {
            let mut snapshot = shared.lock().unwrap_or_else(PoisonError::into_inner);
            if holder.is_none() {
                snapshot.started = Instant::now();
            }
            snapshot.waiting_for = holder;
        }
    }

    /// The GPUs whose workers are not healthy at `now` ([`GpuSnapshot::unhealthy`]:
    /// starting ones too), as `(NVML index, reason)`; empty once every worker ticks.
    pub fn unhealthy(&self, now: Instant) -> Vec<(u32, String)> {
        self.snapshots()
            .iter()
            .filter_map(|s| s.unhealthy(now).map(|why| (s.labels.index, why)))
            .collect()
    }

    /// Every worker's [`Liveness`] at `now`, by NVML index: one pass over the snapshots
    /// for whoever needs both whether all tick and which are down.
    pub fn liveness(&self, now: Instant) -> Vec<(u32, Liveness)> {
        self.snapshots()
            .iter()
            .map(|s| (s.labels.index, s.liveness(now)))
            .collect()
    }

    /// The GPUs whose workers are down at `now` ([`Liveness::Down`]: ended, stalled, or
    /// no first tick within the allowance), as `(NVML index, reason)`.
    pub fn down(&self, now: Instant) -> Vec<(u32, String)> {
        down_of(self.liveness(now))
    }

    /// A copy of every snapshot, each lock held only to clone.
    pub fn snapshots(&self) -> Vec<GpuSnapshot> {
        self.gpus
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }
}

/// One worker's side: counts events and publishes without waiting.
#[derive(Debug)]
pub struct Publisher {
    local: GpuSnapshot,
    shared: Arc<Mutex<GpuSnapshot>>,
}

impl Publisher {
    /// Sets the stall limit for a worker ticking every `tick` ([`stall_after`]).
    pub fn ticking_every(mut self, tick: Duration) -> Self {
        self.local.stall_after = stall_after(tick);
        self.publish();
        self
    }

    /// Says whether the loop measures SM activity (`metric = "sm"`) rather than
    /// utilization, so the reading is published under its own name.
    pub fn measuring_sm_activity(mut self, sm: bool) -> Self {
        self.local.sm_metric = sm;
        self.publish();
        self
    }

    /// Takes in one tick (and the width in force), then publishes.
    pub fn observe(&mut self, tick: &Tick, width_blocks: u32) {
        let s = &mut self.local;
        s.target_percent = tick.target.percent();
        s.util_percent = tick.util.map(|u| u.percent());
        s.duty_ratio = tick.duty.fraction();
        s.width_blocks = width_blocks;
        s.state = Some(tick.state);
        s.foreign = tick.foreign;
        s.filling_beside = tick.state.fills() && tick.shape == LaunchShape::OneInFlight;
        s.filling_gaps = tick.state.fills() && tick.shape == LaunchShape::Gaps;
        s.estimated_cost_ratio = tick.cost.filter(|_| s.filling_gaps);
        s.last_tick = Some(SystemTime::now());
        s.last_tick_at = Some(Instant::now());
        for event in &tick.events {
            match event {
                Event::Yielded { .. } => s.yields_total += 1,
                Event::Paused { .. } => s.pauses_total += 1,
                Event::Unexplained { .. } => s.unexplained_signs_total += 1,
                Event::ProbeFault { .. } => s.probe_faults_total += 1,
                Event::LoadFault { .. } => s.load_faults_total += 1,
                _ => {}
            }
        }
        self.publish();
    }

    /// Sets the slowly refreshed device readings (memory, power), then publishes.
    pub fn set_device(&mut self, memory_used_bytes: Option<u64>, power_watts: Option<f64>) {
        self.local.memory_used_bytes = memory_used_bytes;
        self.local.power_watts = power_watts;
        self.publish();
    }

    /// What this publisher holds (published or not yet).
    pub fn local(&self) -> &GpuSnapshot {
        &self.local
    }

    fn publish(&mut self) {
        // Never wait for a scrape: if the server holds the lock, the next tick publishes.
        match self.shared.try_lock() {
            Ok(mut shared) => shared.clone_from(&self.local),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().clone_from(&self.local),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::{Duty, Time, Utilization};

    fn labels() -> GpuLabels {
        GpuLabels {
            index: 0,
            uuid: "GPU-0".into(),
            model: "sim".into(),
        }
    }

    fn tick(state: State, events: Vec<Event>) -> Tick {
        Tick {
            at: Time::ZERO,
            state,
            target: Utilization::from_percent(50.0).unwrap(),
            sample: None,
            util: Some(Utilization::from_percent(48.0).unwrap()),
            duty: Duty::clamped(0.5),
            width: gpufill_core::Width::ONE_WARP,
            shape: LaunchShape::Bursts,
            foreign: 0,
            probed: None,
            cost: None,
            events,
        }
    }

    #[test]
    fn a_publisher_counts_yields_and_faults_and_publishes_them() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        let p = &mut publishers[0];
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![7],
                    unlisted: false,
                }],
            ),
            1,
        );
        p.observe(&tick(State::Yielding, vec![]), 1);
        let fault = Event::ProbeFault {
            message: "x".into(),
        };
        p.observe(&tick(State::Filling, vec![fault, Event::Filling]), 4);
        let jitter = Event::Unexplained {
            sign: gpufill_core::OthersSign::LateStart { late_us: 90.0 },
        };
        p.observe(&tick(State::Filling, vec![jitter.clone()]), 4);
        p.observe(&tick(State::Filling, vec![jitter]), 4);
        let s = &registry.snapshots()[0];
        assert_eq!((s.yields_total, s.probe_faults_total), (1, 1));
        assert_eq!((s.unexplained_signs_total, s.pauses_total), (2, 0));
        assert_eq!(s.state, Some(State::Filling));
        assert_eq!((s.width_blocks, s.duty_ratio), (4, 0.5));
        assert_eq!(s.util_percent, Some(48.0));
    }

    #[test]
    fn a_worker_is_unhealthy_until_its_first_tick_and_once_ended_or_silent_too_long() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        let publisher = publishers.pop().unwrap();
        let mut publisher = publisher.ticking_every(Duration::from_millis(50));
        assert_eq!(
            stall_after(Duration::from_millis(50)),
            Duration::from_secs(5)
        );
        let now = Instant::now();
        // Before the first tick: starting, which is not healthy.
        let snapshot = &registry.snapshots()[0];
        assert_eq!(snapshot.liveness(now), Liveness::Starting);
        assert_eq!(
            registry.unhealthy(now),
            vec![(0, "starting: no tick yet".to_owned())]
        );
        assert!(registry.down(now).is_empty(), "not logged as stalled yet");
        // A first call that hangs: down once the allowance has passed.
        let later = snapshot.started + STARTUP_ALLOWANCE + Duration::from_secs(1);
        let down = registry.down(later);
        assert_eq!(down.len(), 1);
        assert!(down[0].1.starts_with("no first tick after 31."), "{down:?}");
        publisher.observe(&tick(State::Filling, vec![]), 1);
        assert!(registry.unhealthy(Instant::now()).is_empty());
        let sick = registry.unhealthy(Instant::now() + Duration::from_secs(6));
        assert_eq!(sick.len(), 1);
        assert!(sick[0].1.starts_with("no tick for 6."), "{sick:?}");
        registry.mark_ended(0);
        assert_eq!(
            registry.unhealthy(Instant::now()),
            vec![(0, "worker ended".to_owned())]
        );
    }

    #[test]
    fn staleness_is_judged_on_the_monotonic_clock_not_the_wall_clock() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        publishers[0].observe(&tick(State::Filling, vec![]), 1);
        let mut snapshot = registry.snapshots()[0].clone();
        let now = Instant::now();
        // The wall clock stepped an hour either way since the tick: still ticking.
        for step in [-3600i64, 3600] {
            let offset = Duration::from_secs(step.unsigned_abs());
            snapshot.last_tick = if step < 0 {
                SystemTime::now().checked_sub(offset)
            } else {
                SystemTime::now().checked_add(offset)
            };
            assert_eq!(snapshot.liveness(now), Liveness::Ticking);
        }
        assert!(matches!(
            snapshot.liveness(now + Duration::from_secs(6)),
            Liveness::Down(_)
        ));
    }

    #[test]
    fn a_held_lock_never_blocks_a_publisher_and_nothing_is_lost() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        let p = &mut publishers[0];
        let held = registry.gpus[0].lock().unwrap();
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![],
                    unlisted: false,
                }],
            ),
            1,
        );
        assert_eq!(held.yields_total, 0, "not published while the lock is held");
        drop(held);
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![],
                    unlisted: false,
                }],
            ),
            1,
        );
        assert_eq!(registry.snapshots()[0].yields_total, 2);
    }
}
