//! One GPU's worker: it opens the GPU through an [`Opener`], ticks its fill loop on the
//! system clock under a [`Supervisor`] that reopens a lost GPU with backoff, and leaves
//! the GPU idle when it stops. Why a worker failed is a [`WorkerError`].

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpufill_core::{Clock, State, Supervisor, SystemClock, Time};
use tracing::{info, info_span, warn};

use crate::claim::{Claim, ClaimError, wait_for_claim};
use crate::device_hint::DeviceOpenHint;
use crate::faultlog::{FaultLog, log_tick};
use crate::opener::Opener;
use crate::select::Gpu;
use crate::settings::Settings;
use crate::snapshot::Registry;
use crate::steering::Steering;

/// Why one GPU's worker failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Its GPU could not be opened when the worker started: the [`Opener`]'s error.
    #[error("{0}")]
    Open(Box<dyn std::error::Error + Send + Sync>),
    /// Its GPU failed while filling and had not been reopened when the worker stopped
    /// (each attempt is logged).
    #[error("stopped filling: the GPU failed and was not reopened (see the log above)")]
    Lost,
    /// The worker panicked.
    #[error("worker panicked")]
    Panicked,
}

/// What one worker needs besides its opener and steering.
pub(crate) struct Job {
    pub(crate) gpu: Gpu,
    pub(crate) settings: Settings,
    pub(crate) mps: bool,
    pub(crate) readings: bool,
    pub(crate) deadline: Option<Time>,
    pub(crate) clock: SystemClock,
    /// The GPU's lock, to wait for before opening the GPU, when something other than a
    /// gpufill held it as the agent started.
    pub(crate) wait: Option<Wait>,
}

/// A GPU's lock to wait for ([`wait_for_claim`]), and where what is waited for goes.
pub(crate) struct Wait {
    pub(crate) dir: PathBuf,
    /// What held the lock as the agent started.
    pub(crate) held: ClaimError,
    pub(crate) retry: Duration,
    /// The agent's claims, which the claim joins once taken, to be held while it lives.
    pub(crate) claims: Arc<Mutex<Vec<Claim>>>,
    /// Where the GPU's snapshot says that it waits: the registry and the GPU's slot.
    pub(crate) registry: Arc<Registry>,
    pub(crate) slot: usize,
}

impl Job {
    /// Fills the GPU until `stop` is set or the deadline passes.
    pub(crate) fn run<O: Opener>(
        self,
        opener: &O,
        steering: Steering,
        stop: &AtomicBool,
    ) -> Result<(), WorkerError> {
        let span = info_span!("gpu", gpu = self.gpu.index);
        let _entered = span.enter();
        if let Some(wait) = &self.wait
            && !self.claim(wait, stop)
        {
            // Stopped while waiting: nothing was opened, nothing to leave idle.
            return Ok(());
        }
        let (gpu, mps, clock) = (&self.gpu, self.mps, &self.clock);
        // A GPU that cannot be opened at start is an error; one lost later is reopened
        // with backoff by the supervisor (docs/faults.md), leaving other GPUs alone.
        let first = opener
            .open(gpu, &self.settings, mps, clock.now())
            .map_err(|e| WorkerError::Open(Box::new(e)))?;
        // Shared by the step (schedule, updates, snapshots) and the reopening, which
        // builds the new loop from the last settings; never borrowed by both at once.
        let steering = RefCell::new(steering);
        let reopen = |now: Time| {
            info!("reopening the GPU");
            let latest = steering.borrow().reloaded();
            opener.open(gpu, latest.as_deref().unwrap_or(&self.settings), mps, now)
        };
        let mut supervisor = Supervisor::new(first, reopen, self.settings.retry_settings());
        let mut faults = FaultLog::default();
        let stepped = Cell::new(false);
        let readings = self.readings;
        let mut hint = if opener.watches_devices() {
            DeviceOpenHint::on_device_files()
        } else {
            DeviceOpenHint::disabled()
        };
        let last = supervisor.run_watched(
            clock,
            self.settings.tick(),
            &mut hint,
            |fill, now| {
                stepped.set(true);
                steering.borrow_mut().step(fill, now, |probe| {
                    if readings {
                        opener.readings(probe)
                    } else {
                        (None, None)
                    }
                })
            },
            |step| {
                // While no loop is open (a lost GPU waiting to be reopened) the
                // supervisor's own stopped tick is what there is to publish.
                if !stepped.replace(false) {
                    steering
                        .borrow_mut()
                        .after_step(&step.tick, || (None, None));
                }
                log_tick(&step.tick, &mut faults);
                faults.log(step);
                !stop.load(Ordering::Relaxed) && self.deadline.is_none_or(|d| step.tick.at < d)
            },
        );
        let stopping = clock.now();
        let quiet = supervisor
            .fill()
            .is_none_or(|fill| opener.quiesce(fill, Duration::from_millis(100)));
        if quiet {
            let ms = (clock.now() - stopping).as_secs_f64() * 1e3;
            info!(ms, "GPU idle: no kernel of ours queued or running");
        } else {
            warn!("kernels still queued 100 ms after stopping");
        }
        if last.tick.state == State::Stopped {
            return Err(WorkerError::Lost);
        }
        Ok(())
    }

    /// Waits for the GPU's lock (`wait`) until it is free: true then, false when
    /// stopped first (by `stop` or the deadline).
    fn claim(&self, wait: &Wait, stop: &AtomicBool) -> bool {
        let stopped =
            || stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| self.clock.now() >= d);
        let waiting = |holder| wait.registry.set_waiting(wait.slot, holder);
        match wait_for_claim(
            &wait.dir, &self.gpu, &wait.held, wait.retry, waiting, stopped,
        ) {
            Ok(claim) => {
                let mut claims = wait.claims.lock().unwrap_or_else(PoisonError::into_inner);
                claims.extend(claim);
                true
            }
            Err(_stopped) => false,
        }
    }
}
