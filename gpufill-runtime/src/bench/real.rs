//! The bench on a real GPU: the fill loop `gpufill run` builds ([`open_gpu`]), on the
//! real clock, and a foreign CUDA process, started by the caller, watched through NVML
//! every 1 ms.

use std::io::Read;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpufill_core::{Clock, SystemClock, Tick, Time, Utilization};
use gpufill_nvml::{Nvml, ProbeError};

use super::{ForeignSeen, Rig, RigError};
use crate::{
    DeviceOpenHint, Gpu, GpuId, GpuSelector, OpenError, RealLoop, SelectError, Settings, open_gpu,
};

/// How often the watcher reads NVML's process list (microseconds a call:
/// docs/benchmarks.md#hardware-tests-run-b).
const WATCH_EVERY: Duration = Duration::from_millis(1);
/// The watcher gives up on a foreign process that has not left after this long.
const WATCH_LIMIT: Duration = Duration::from_secs(60);

/// Starts the yield test's foreign process on the CUDA device of this ordinal, to run
/// for this long, with its stderr piped (its message when it fails): a process that
/// runs [`super::foreign_load`]. The `gpufill` binary starts itself as
/// `gpufill bench-foreign`.
pub type SpawnForeign = Box<dyn Fn(usize, Duration) -> Result<Child, RigError>>;

/// Why a real GPU could not be opened for the bench.
#[derive(Debug, thiserror::Error)]
pub enum RealRigError {
    /// Opening failed, or there is no driver ([`OpenError::NoDriver`]).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// NVML could not start.
    #[error("cannot start NVML")]
    Nvml(#[source] ProbeError),
    /// NVML could not list the GPU's processes.
    #[error(transparent)]
    Processes(ProbeError),
    /// The GPU could not be selected.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// Nothing was selected.
    #[error("no GPU to bench")]
    NoGpu,
    /// Other compute processes are on the GPU (and `force` was not given).
    #[error(
        "GPU {index} is in use by compute processes {pids:?}: the numbers would be wrong \
         (stop them, or pass --force to measure anyway, ignoring them)"
    )]
    InUse {
        /// NVML index.
        index: u32,
        /// Their PIDs.
        pids: Vec<u32>,
    },
}

impl RealRigError {
    /// Whether the settings are at fault (a GPU named that is not there).
    pub fn is_settings_error(&self) -> bool {
        matches!(self, RealRigError::Select(e) if e.is_settings_error())
    }
}

/// One real GPU under the fill loop.
pub struct RealRig {
    fill: RealLoop,
    clock: SystemClock,
    tick: Duration,
    next: Time,
    nvml: Nvml,
    target: Gpu,
    idle_power: Option<f64>,
    mps: bool,
    /// Compute PIDs present before we started (only with `force`).
    present: Vec<u32>,
    spawn: SpawnForeign,
    watcher: Option<Watcher>,
    /// The newcomer hint `gpufill run` uses: the yield test measures the same path.
    hint: DeviceOpenHint,
    /// A watch window still open after the last wait.
    watch_until: Option<Time>,
}

struct Watcher {
    seen: Arc<Mutex<ForeignSeen>>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl RealRig {
    /// Finds the GPU (`gpu`, else the settings' first), checks that it is free (unless
    /// `force`: then the processes on it are ignored), measures its idle power and opens
    /// the fill loop on it. `spawn` starts the yield test's foreign process.
    ///
    /// # Errors
    /// The driver is missing ([`OpenError::NoDriver`]), the GPU does not exist
    /// ([`RealRigError::is_settings_error`]), another process is on it (without
    /// `force`), or opening fails.
    pub fn open(
        settings: &Settings,
        gpu: Option<GpuId>,
        force: bool,
        spawn: SpawnForeign,
    ) -> Result<RealRig, RealRigError> {
        if !gpufill_cuda::driver_present() {
            return Err(OpenError::NoDriver.into());
        }
        let nvml = Nvml::init().map_err(RealRigError::Nvml)?;
        let selector = gpu.map_or_else(|| settings.gpus.clone(), |id| GpuSelector::List(vec![id]));
        let gpus = crate::select(nvml, &selector)?;
        let Some(target) = gpus.into_iter().next() else {
            return Err(RealRigError::NoGpu);
        };
        let present = nvml
            .compute_pids(&target.uuid)
            .map_err(RealRigError::Processes)?;
        if !present.is_empty() && !force {
            return Err(RealRigError::InUse {
                index: target.index,
                pids: present,
            });
        }
        let mut settings = settings.clone();
        settings.yielding.ignore_pids.extend(&present);
        let idle_power = idle_power(&nvml, &target.uuid);
        let mps = crate::mps::daemon_running();
        let fill = open_gpu(nvml, &target, &settings, mps)?;
        let clock = SystemClock::new();
        Ok(RealRig {
            fill,
            clock,
            tick: settings.tick(),
            next: clock.now(),
            hint: DeviceOpenHint::on_device_files(),
            watch_until: None,
            nvml,
            target,
            idle_power,
            mps,
            present,
            spawn,
            watcher: None,
        })
    }

    fn current_load(&self) -> Option<&gpufill_cuda::CudaLoad> {
        self.fill.load_source().current()
    }

    fn stop_watcher(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.stop.store(true, Ordering::Relaxed);
            if w.handle.join().is_err() {
                tracing::warn!("the bench's process watcher panicked");
            }
        }
    }

    /// Starts the foreign process for `run`, and the thread that watches it.
    fn start_watched(&mut self, run: Duration) -> Result<(), RigError> {
        let child = (self.spawn)(self.target.ordinal, run)?;
        let mut known = self.fill.probe().own().pids.clone();
        known.extend(&self.present);
        let seen = Arc::new(Mutex::new(ForeignSeen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let watch = Watch {
            nvml: self.nvml,
            uuid: self.target.uuid.clone(),
            known,
            clock: self.clock,
            seen: Arc::clone(&seen),
            stop: Arc::clone(&stop),
        };
        let handle = thread::Builder::new()
            .name("gpufill-bench-watch".into())
            .spawn(move || watch.run(child))
            .map_err(|e| format!("cannot start the watcher thread: {e}"))?;
        self.watcher = Some(Watcher { seen, stop, handle });
        Ok(())
    }
}

/// Board power of the idle GPU, before our context exists: the mean of the last second
/// of readings once they have settled (within 2 W over 1 s), waiting at most 10 s. A GPU
/// that was busy just before (another benchmark, say) keeps its clocks up and reads
/// high for some seconds (seen in
/// docs/benchmarks-history.md#results-on-the-h200-session-of-2026-11-21-driver-58015904).
fn idle_power(nvml: &Nvml, uuid: &str) -> Option<f64> {
    const WINDOW: usize = 10;
    let mut readings = Vec::new();
    for _ in 0..100 {
        if let Some(w) = nvml
            .gpus()
            .ok()
            .and_then(|gpus| gpus.into_iter().find(|g| g.uuid == uuid))
            .and_then(|g| g.power_watts)
        {
            readings.push(w);
        }
        if settled(&readings, WINDOW, 2.0) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let last = &readings[readings.len().saturating_sub(WINDOW)..];
    (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64)
}

/// Whether the last `window` readings lie within `spread` of each other.
fn settled(readings: &[f64], window: usize, spread: f64) -> bool {
    let Some(last) = readings.len().checked_sub(window).map(|at| &readings[at..]) else {
        return false;
    };
    let (lo, hi) = last
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &w| {
            (lo.min(w), hi.max(w))
        });
    hi - lo <= spread
}

impl Rig for RealRig {
    fn name(&self) -> String {
        format!("{} (GPU {})", self.target.name, self.target.index)
    }

    fn now(&self) -> Time {
        self.clock.now()
    }

    fn step(&mut self, target: Utilization) -> Result<Tick, RigError> {
        self.fill.set_target(target);
        Ok(self.fill.step(self.clock.now()))
    }

    fn wait(&mut self) {
        // A late tick (the yield test's quiesce waits) causes no burst of catch-up ticks.
        self.next = gpufill_core::time::next_tick(self.next, self.tick, self.clock.now());
        let fill = &mut self.fill;
        self.watch_until = gpufill_core::hint::wait_for_tick(
            &self.clock,
            self.next,
            &mut self.hint,
            self.watch_until,
            |now| fill.newcomer_listed(now),
        );
    }

    fn power_watts(&mut self) -> Option<f64> {
        self.fill.probe().power_watts().ok()
    }

    fn idle_power_watts(&self) -> Option<f64> {
        self.idle_power
    }

    fn own_memory_mib(&mut self) -> Option<f64> {
        let bytes = self.fill.probe().own_memory_bytes().ok().flatten()?;
        Some(bytes as f64 / f64::from(1u32 << 20))
    }

    fn yield_unsupported(&self) -> Option<String> {
        self.mps.then(|| {
            "an MPS control daemon runs: under MPS gpufill fills beside others and never yields"
                .to_owned()
        })
    }

    fn start_foreign(&mut self, run: Duration) -> Result<(), RigError> {
        self.start_watched(run)
    }

    fn foreign(&mut self) -> ForeignSeen {
        self.watcher
            .as_ref()
            .map_or_else(ForeignSeen::default, |w| {
                w.seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
    }

    fn quiesce(&mut self) -> Option<Time> {
        let quiet = self
            .current_load()
            .is_none_or(|load| load.quiesce(Duration::from_millis(100)));
        quiet.then(|| self.clock.now())
    }

    fn kernels_launched(&self) -> Option<u64> {
        self.current_load().map(|l| l.stats().kernels_launched)
    }

    fn overlap(&mut self) -> Option<Duration> {
        None
    }

    fn finish(&mut self) {
        self.stop_watcher();
        if let Err(e) = self.fill.idle(self.clock.now()) {
            tracing::warn!("cannot leave the GPU idle: {e}");
        }
        if let Some(load) = self.current_load()
            && !load.quiesce(Duration::from_millis(100))
        {
            tracing::warn!("kernels still queued 100 ms after stopping");
        }
    }
}

impl Drop for RealRig {
    fn drop(&mut self) {
        self.stop_watcher();
    }
}

/// The watcher thread's state: it owns the foreign child.
struct Watch {
    nvml: Nvml,
    uuid: String,
    /// PIDs that are not the foreign process (ours, and any present at start).
    known: Vec<u32>,
    clock: SystemClock,
    seen: Arc<Mutex<ForeignSeen>>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    fn run(self, mut child: Child) {
        let started = self.clock.now();
        loop {
            let now = self.clock.now();
            let listed = match self.nvml.compute_pids(&self.uuid) {
                Ok(pids) => pids.iter().any(|p| !self.known.contains(p)),
                Err(e) => {
                    self.update(|s| {
                        s.failure = Some(format!("cannot read NVML's process list: {e}"))
                    });
                    break;
                }
            };
            let exited = match child.try_wait() {
                Ok(status) => status,
                Err(e) => {
                    self.update(|s| s.failure = Some(format!("cannot wait for it: {e}")));
                    break;
                }
            };
            let done = self.record(now, listed, exited.is_some());
            if let Some(status) = exited.filter(|s| !s.success()) {
                let reason = stderr_of(&mut child);
                self.update(|s| s.failure = Some(format!("{status}: {reason}")));
                break;
            }
            if done || self.stop.load(Ordering::Relaxed) {
                break;
            }
            if now.saturating_since(started) > WATCH_LIMIT {
                self.update(|s| s.failure = Some("still listed after 60 s".into()));
                break;
            }
            thread::sleep(WATCH_EVERY);
        }
        // Best effort: it may have exited already.
        let _ = child.kill();
        let _ = child.wait();
    }

    fn record(&self, now: Time, listed: bool, exited: bool) -> bool {
        observe(
            &mut self.seen.lock().unwrap_or_else(PoisonError::into_inner),
            now,
            listed,
            exited,
        )
    }

    fn update(&self, f: impl FnOnce(&mut ForeignSeen)) {
        f(&mut self.seen.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// Records what one poll at `now` saw; true once the process has exited and, if it was
/// ever listed, left the list.
fn observe(s: &mut ForeignSeen, now: Time, listed: bool, exited: bool) -> bool {
    if listed && s.listed.is_none() {
        s.listed = Some(now);
    }
    if !listed && s.listed.is_some() && s.unlisted.is_none() {
        s.unlisted = Some(now);
    }
    if exited && s.exited.is_none() {
        s.exited = Some(now);
    }
    // A process that exits unlisted never will be: stop waiting for it.
    s.exited.is_some() && (s.unlisted.is_some() || s.listed.is_none())
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    let text = text.trim();
    if text.is_empty() {
        "no message".into()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_power_waits_for_readings_that_have_stopped_falling() {
        let falling: Vec<f64> = (0..12).map(|i| 170.0 - 8.0 * f64::from(i)).collect();
        assert!(!settled(&falling, 10, 2.0));
        let flat = [
            90.0, 80.5, 80.0, 81.0, 80.2, 80.9, 80.1, 80.4, 80.3, 80.6, 80.0,
        ];
        assert!(settled(&flat, 10, 2.0));
        assert!(
            !settled(&flat[..9], 10, 2.0),
            "fewer readings than the window"
        );
    }

    #[test]
    fn the_watcher_keeps_the_first_listing_leaving_and_exit() {
        let mut s = ForeignSeen::default();
        let ms = Time::from_millis;
        assert!(!observe(&mut s, ms(1), false, false));
        assert!(!observe(&mut s, ms(2), true, false));
        assert!(!observe(&mut s, ms(3), true, false));
        assert!(!observe(&mut s, ms(4), true, true));
        assert!(observe(&mut s, ms(5), false, true));
        assert_eq!(
            (s.listed, s.unlisted, s.exited),
            (Some(ms(2)), Some(ms(5)), Some(ms(4)))
        );
    }

    #[test]
    fn the_watcher_stops_for_a_process_that_exits_without_being_listed() {
        let mut s = ForeignSeen::default();
        assert!(observe(&mut s, Time::from_millis(7), false, true));
        assert_eq!(s.listed, None);
    }

    #[test]
    fn only_a_gpu_that_is_not_there_is_the_settings_fault() {
        let missing = RealRigError::Select(SelectError::NoSuchGpu {
            id: GpuId::Index(7),
            found: 1,
        });
        assert!(missing.is_settings_error());
        assert!(!RealRigError::NoGpu.is_settings_error());
        assert!(!RealRigError::from(OpenError::NoDriver).is_settings_error());
    }

    #[test]
    fn a_busy_gpu_names_its_processes_and_the_way_out() {
        let e = RealRigError::InUse {
            index: 1,
            pids: vec![42, 43],
        };
        assert_eq!(
            e.to_string(),
            "GPU 1 is in use by compute processes [42, 43]: the numbers would be wrong \
             (stop them, or pass --force to measure anyway, ignoring them)"
        );
    }
}
