//! [`Agent`]: one supervised worker thread per GPU ([`crate::worker`]), started,
//! updated, watched and stopped from the caller's thread.
//!
//! Each worker opens its GPU through an [`Opener`] (the real one, [`NvmlCuda`], or the
//! simulated GPU's, [`crate::SimOpener`]), then ticks its fill loop on the system
//! clock under a supervisor that reopens a lost GPU with backoff. Around each step a
//! [`Steering`] takes in new settings, sets the scheduled target and publishes a
//! [`GpuSnapshot`]. A worker that ends, by a stop, an error or a panic, says so in its
//! snapshot at once (`worker_running` false) and logs why; [`Agent::join`] collects the
//! errors, each a [`WorkerError`].

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::Sender;
use gpufill_core::{Clock, SystemClock};
use gpufill_nvml::Nvml;
use tracing::{error, info};

use crate::claim::{Claim, ClaimError, Claimed, claim_all, listed_gpufill};
use crate::open::OpenError;
use crate::opener::{NvmlCuda, Opener};
use crate::select::{Gpu, SelectError, select_listed};
use crate::settings::{Metric, Settings, SettingsError};
use crate::snapshot::{GpuLabels, GpuSnapshot, Registry};
use crate::steering::{DayClock, Steering};
use crate::worker::{Job, Wait, WorkerError};

/// How an agent runs, besides its [`Settings`].
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Whether an MPS control daemon runs ([`crate::mps::daemon_running`]): it decides
    /// `yield.mps = "auto"`.
    pub mps: bool,
    /// Where schedule windows read the time of day.
    pub day_clock: DayClock,
    /// Read our own GPU memory and the board power once a second for the snapshots
    /// (costs some CPU; a metrics endpoint wants them).
    pub device_readings: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Where to claim each GPU, so that a second gpufill on it is refused: a lock file
    /// per GPU ([`crate::claim_all`]; `gpufill run` uses [`crate::CLAIM_DIR`]). `None`
    /// claims nothing (the default: tests, and embedders that coordinate otherwise).
    /// A GPU whose lock something other than a gpufill holds waits for it, alone
    /// ([`crate::Claimed::Waiting`]); another gpufill's lock refuses the start.
    pub claim_dir: Option<PathBuf>,
    /// How often a GPU that waits for its lock tries again (5 s by default).
    pub claim_retry: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            mps: false,
            day_clock: DayClock::Local,
            device_readings: false,
            duration: None,
            claim_dir: None,
            claim_retry: Duration::from_secs(5),
        }
    }
}

/// Why an agent could not start, or what went wrong while it ran.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The settings are invalid.
    #[error("invalid settings: {0}")]
    Settings(#[from] SettingsError),
    /// NVML could not start.
    #[error("cannot start NVML: {0}")]
    Nvml(#[from] gpufill_nvml::ProbeError),
    /// The GPUs could not be selected.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// A GPU cannot give what the settings ask (GPM for `metric = "sm"`).
    #[error(transparent)]
    Gpm(#[from] crate::gpm::GpmError),
    /// A GPU cannot be opened as the settings ask (a grid wider than it holds), or
    /// this machine has no NVIDIA driver ([`OpenError::NoDriver`]).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Another gpufill fills one of the GPUs ([`ClaimError::by_gpufill`]).
    #[error(transparent)]
    Claimed(#[from] ClaimError),
    /// A worker thread could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(#[from] std::io::Error),
    /// Workers failed: each GPU's NVML index and why.
    #[error("{} of {total} GPU workers failed: {}", failed.len(), describe(failed))]
    Workers {
        /// `(NVML index, why)` of each failed worker.
        failed: Vec<(u32, WorkerError)>,
        /// How many workers ran.
        total: usize,
    },
}

impl AgentError {
    /// Whether the settings are at fault rather than the machine: a binary exits with
    /// its usage status for these.
    pub fn is_settings_error(&self) -> bool {
        match self {
            AgentError::Settings(_) => true,
            AgentError::Select(e) => e.is_settings_error(),
            AgentError::Gpm(e) => e.is_settings_error(),
            AgentError::Open(e) => e.is_settings_error(),
            AgentError::Claimed(_) => true,
            _ => false,
        }
    }
}

fn describe(failed: &[(u32, WorkerError)]) -> String {
    let each: Vec<String> = failed
        .iter()
        .map(|(gpu, why)| format!("GPU {gpu}: {why}"))
        .collect();
    each.join("; ")
}

struct Worker {
    index: u32,
    handle: JoinHandle<Result<(), WorkerError>>,
}

/// Fills GPUs: one supervised worker thread per GPU.
///
/// ```no_run
/// use gpufill_runtime::{Agent, AgentOptions, Settings};
///
/// let agent = Agent::on_this_machine(Settings::default(), AgentOptions::default())?;
/// std::thread::sleep(std::time::Duration::from_secs(5));
/// for gpu in agent.snapshots() {
///     println!("GPU {}: {:?} at {:.0} %", gpu.labels.index, gpu.state, gpu.duty_ratio * 100.0);
/// }
/// agent.stop();
/// agent.join()?;
/// # Ok::<(), gpufill_runtime::AgentError>(())
/// ```
pub struct Agent {
    workers: Vec<Worker>,
    updates: Vec<Sender<Arc<Settings>>>,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
    /// The settings in force; behind a lock so that a shared agent takes updates.
    settings: Mutex<Settings>,
    /// The GPUs filled, for the checks an update must pass as the start did.
    gpus: Vec<Gpu>,
    /// Whether an MPS control daemon ran when the agent started.
    mps: bool,
    /// Each GPU's claim ([`AgentOptions::claim_dir`]), held while the agent lives; a
    /// GPU that waited for its lock adds its claim once taken.
    _claims: Arc<Mutex<Vec<Claim>>>,
}

/// Whether `settings` fit every GPU in `gpus`: with the `util` metric, a grid of
/// `load.width_blocks` that each holds at once ([`Gpu::check_width`]); the `sm` metric
/// picks its own width.
fn check_fits(gpus: &[Gpu], settings: &Settings) -> Result<(), String> {
    if settings.metric == Metric::Util {
        for gpu in gpus {
            gpu.check_width(settings.load.width_blocks)?;
        }
    }
    Ok(())
}

impl Agent {
    /// Fills this machine's GPUs as `settings.gpus` selects them: checks the driver,
    /// starts NVML, selects the GPUs (MIG skipped), checks GPM for `metric = "sm"`,
    /// refuses GPUs where NVML lists another gpufill (by its process name), and
    /// starts one worker per GPU. `options.mps` is or-ed with what
    /// [`crate::mps::daemon_running`] finds.
    ///
    /// # Errors
    /// [`AgentError`] before any worker starts; a GPU that fails to open later shows in
    /// its snapshot and in [`Agent::join`].
    pub fn on_this_machine(settings: Settings, options: AgentOptions) -> Result<Agent, AgentError> {
        settings.validate()?;
        if !gpufill_cuda::driver_present() {
            return Err(OpenError::NoDriver.into());
        }
        let nvml = Nvml::init()?;
        // One listing for the selection and for the other gpufills on the GPUs chosen.
        let listed = nvml.gpus().map_err(SelectError::from)?;
        let gpus = select_listed(&listed, &settings.gpus)?;
        if settings.metric == Metric::Sm {
            crate::gpm::check_all(nvml, &gpus)?;
        }
        listed_gpufill(&listed, &gpus, std::process::id())?;
        let mps = options.mps || crate::mps::daemon_running();
        if mps {
            info!("MPS control daemon found");
        }
        Agent::start(
            NvmlCuda { nvml },
            gpus,
            settings,
            AgentOptions { mps, ..options },
        )
    }

    /// Starts one worker per GPU in `gpus`, each opening its GPU through `opener`, once
    /// each GPU is claimed in `options.claim_dir` (if any). A GPU whose lock something
    /// other than a gpufill holds does not hold up the others: its worker says who
    /// holds it, waits for it (trying again every `options.claim_retry`), and then
    /// fills; meanwhile its snapshot says so ([`GpuSnapshot::waiting_for`]).
    ///
    /// # Errors
    /// [`AgentError::Settings`] for invalid settings, [`AgentError::Open`] for settings a
    /// GPU cannot meet (a grid wider than it holds at once), [`AgentError::Claimed`] when
    /// another gpufill holds any GPU's claim, all before any worker starts;
    /// [`AgentError::Thread`] when a thread cannot start (the workers already started
    /// are stopped).
    pub fn start<O: Opener>(
        opener: O,
        gpus: Vec<Gpu>,
        settings: Settings,
        options: AgentOptions,
    ) -> Result<Agent, AgentError> {
        settings.validate()?;
        // Up front, as a settings error (exit 2 in the binary).
        check_fits(&gpus, &settings).map_err(OpenError::Width)?;
        let claimed = match &options.claim_dir {
            Some(dir) => claim_all(dir, &gpus)?,
            None => gpus.iter().map(|_| Claimed::Unclaimed).collect(),
        };
        let claims = Arc::new(Mutex::new(Vec::new()));
        let labels = gpus.iter().map(labels_of).collect();
        let (registry, publishers) = Registry::new(labels);
        let stop = Arc::new(AtomicBool::new(false));
        let opener = Arc::new(opener);
        let clock = SystemClock::new();
        let mut agent = Agent {
            workers: Vec::new(),
            updates: Vec::new(),
            registry: Arc::clone(&registry),
            stop: Arc::clone(&stop),
            settings: Mutex::new(settings.clone()),
            gpus: gpus.clone(),
            mps: options.mps,
            _claims: Arc::clone(&claims),
        };
        let each = gpus.into_iter().zip(publishers).zip(claimed);
        for (slot, ((gpu, publisher), claimed)) in each.enumerate() {
            let wait = match (claimed, &options.claim_dir) {
                (Claimed::Held(claim), _) => {
                    claims
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(claim);
                    None
                }
                (Claimed::Waiting(held), Some(dir)) => Some(Wait {
                    dir: dir.clone(),
                    held,
                    retry: options.claim_retry,
                    claims: Arc::clone(&claims),
                    registry: Arc::clone(&registry),
                    slot,
                }),
                _ => None,
            };
            let (tx, rx) = crossbeam_channel::unbounded();
            let steering = Steering::new(&settings, options.mps, options.day_clock)
                .with_updates(rx)
                .with_publisher(Some(
                    publisher
                        .measuring_sm_activity(settings.metric == Metric::Sm)
                        .ticking_every(settings.tick()),
                ));
            let job = Job {
                gpu,
                settings: settings.clone(),
                mps: options.mps,
                readings: options.device_readings,
                deadline: options.duration.map(|d| clock.now() + d),
                clock,
                wait,
            };
            let (opener, stop, registry) = (
                Arc::clone(&opener),
                Arc::clone(&stop),
                Arc::clone(&registry),
            );
            let index = job.gpu.index;
            let spawned = thread::Builder::new()
                .name(format!("gpufill-gpu{index}"))
                .spawn(move || {
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        job.run(&*opener, steering, &stop)
                    }))
                    .unwrap_or(Err(WorkerError::Panicked));
                    // Said at once, not at join: the snapshot and the log show it now.
                    registry.mark_ended(slot);
                    if let Err(e) = &result {
                        error!(gpu = index, "worker ended: {e}");
                    }
                    result
                });
            match spawned {
                Ok(handle) => {
                    agent.workers.push(Worker { index, handle });
                    agent.updates.push(tx);
                }
                Err(e) => {
                    agent.stop();
                    let _ = agent.join();
                    return Err(AgentError::Thread(e));
                }
            }
        }
        Ok(agent)
    }

    /// Takes new settings: each worker applies them at its next tick, without restarting
    /// anything. Keys that need a restart ([`crate::RESTART_KEYS`]) keep their old
    /// values; their names are returned. They must pass the checks the start made,
    /// against the GPUs too: a reload that a reopened GPU could not meet would fail every
    /// reopen after a GPU loss. Takes `&self`, as [`Agent::stop`] does: an agent shared
    /// between threads (in an `Arc`) needs no lock of the caller's.
    ///
    /// # Errors
    /// [`SettingsError`] when `settings` is invalid or a GPU cannot meet it (a
    /// `load.width_blocks` wider than it holds at once); nothing changes then.
    pub fn update(&self, settings: Settings) -> Result<Vec<&'static str>, SettingsError> {
        settings.validate()?;
        // Held to the end, so that two updates reach the workers in the order they
        // take effect here.
        let mut in_force = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        let (settings, kept) = in_force.live_update(settings);
        check_fits(&self.gpus, &settings).map_err(|reason| SettingsError {
            key: "load.width_blocks",
            reason,
            other: None,
        })?;
        let shared = Arc::new(settings.clone());
        for tx in &self.updates {
            // A worker that has ended has dropped its receiver: nothing to update.
            let _ = tx.send(Arc::clone(&shared));
        }
        *in_force = settings;
        Ok(kept)
    }

    /// Whether an MPS control daemon ran when the agent started (`AgentOptions::mps`,
    /// or found by [`Agent::on_this_machine`]): this process's CUDA contexts are then
    /// its clients, for as long as the process lives ([`crate::mps`]).
    pub fn mps(&self) -> bool {
        self.mps
    }

    /// The settings in force (a copy).
    pub fn settings(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every GPU's latest snapshot, in the order the GPUs were given.
    pub fn snapshots(&self) -> Vec<GpuSnapshot> {
        self.registry.snapshots()
    }

    /// The snapshots' registry, for a reader on another thread (a metrics endpoint).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// The flag that stops every worker when set (e.g. by a signal handler).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Asks every worker to stop: each leaves its GPU idle within a tick and the burst
    /// already queued.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether every worker has ended.
    pub fn is_finished(&self) -> bool {
        self.workers.iter().all(|w| w.handle.is_finished())
    }

    /// Waits for every worker to end.
    ///
    /// # Errors
    /// [`AgentError::Workers`] naming each GPU whose worker failed.
    pub fn join(mut self) -> Result<(), AgentError> {
        let workers = std::mem::take(&mut self.workers);
        let total = workers.len();
        let failed: Vec<(u32, WorkerError)> = workers
            .into_iter()
            .filter_map(|w| {
                let result = w.handle.join().unwrap_or(Err(WorkerError::Panicked));
                result.err().map(|e| (w.index, e))
            })
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(AgentError::Workers { failed, total })
        }
    }
}

impl Drop for Agent {
    /// An agent dropped without [`Agent::join`] stops its workers (each leaves its GPU
    /// idle within a tick and the burst already queued) without waiting for them.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The labels a GPU's snapshot and metrics carry.
pub fn labels_of(gpu: &Gpu) -> GpuLabels {
    GpuLabels {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        model: gpu.name.clone(),
    }
}
