//! The pacing thread of [`LaunchShape::OneInFlight`](gpufill_core::LaunchShape): one
//! kernel of ours at a time, then an idle gap, launched from a thread that
//! [`CudaLoad`](crate::CudaLoad) owns.
//!
//! Why a thread: the gaps are a fraction of a millisecond (a 500 us kernel at half duty
//! rests 500 us), far shorter than a loop tick, and the next kernel may start only once
//! the last one has finished, which a tick cannot see in time. Why one kernel at a time:
//! without MPS the GPU time-slices between contexts, and a foreign kernel that arrives
//! while work of ours is *queued* can wait a whole time slice (about 2 ms on an H100),
//! while one that arrives beside a *single* kernel of ours waits at most what is left of
//! it (docs/gpu-facts.md, "Launch shape and a mostly-idle neighbour").
//!
//! The cycle: launch one kernel of `beside_kernel` at the load's width, record the event
//! after it, sleep about the kernel's length, poll the event with a backoff (20 us
//! doubling to 1 ms; never spinning) until it has finished, rest the gap
//! ([`one_in_flight_gap`]), again. The gap is counted from the earliest moment the
//! kernel can have ended (its launch plus its length, or the last poll that found it
//! running), not from when the poll saw it done, so a late wake-up does not lower the
//! duty; the GPU may then rest up to that lateness less than the full gap. The next launch happens only after the previous kernel
//! was seen to finish, so two of our kernels are never queued at once; before its first
//! launch the thread waits the same way for whatever was queued before it started (a
//! burst), so the promise holds from the first launch on.
//!
//! Every wait is on a condvar with a timeout, so a stop wakes the thread at once; it then
//! exits without waiting for its kernel in flight (at most `beside_kernel`), which the
//! shared event still covers: [`CudaLoad::quiesce`](crate::CudaLoad::quiesce) polls it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream};
use gpufill_core::Load;

use crate::error::CudaError;
use crate::launcher::launch_spin;
use crate::plan::{backoff, one_in_flight_gap};

/// First wait before polling the event again once the kernel's length has passed.
const FIRST_POLL: Duration = Duration::from_micros(20);
/// Longest wait between polls (a kernel slowed by another context's time slice).
const MAX_POLL: Duration = Duration::from_millis(1);

/// What the launcher needs to launch: handed to the thread, which binds the context.
pub(crate) struct Launcher {
    /// Our context, made current on the thread before anything else.
    pub ctx: Arc<CudaContext>,
    /// The stream the bursts use too, so one event covers both.
    pub stream: Arc<CudaStream>,
    /// The spin kernel.
    pub func: CudaFunction,
    /// The launcher's one event, recorded after each kernel.
    pub event: Arc<CudaEvent>,
    /// The length of each kernel.
    pub kernel: Duration,
}

/// The state the caller's thread and the pacing thread share.
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    /// The load in force: its duty sets the gap, its width the next kernel's.
    load: Load,
    /// Asked to stop: no more launches; the thread exits at its next wait.
    stop: bool,
    /// The thread has exited (it sets this last).
    exited: bool,
    /// The error the thread stopped on.
    error: Option<CudaError>,
    /// Kernels launched.
    kernels: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a stopped pacing thread leaves behind.
pub(crate) struct Stopped {
    /// Kernels it launched.
    pub kernels: u64,
    /// The error it stopped on, if it did.
    pub error: Option<CudaError>,
}

/// A running (or exited, not yet joined) pacing thread.
pub(crate) struct Pacing {
    shared: Arc<Shared>,
    handle: JoinHandle<()>,
}

impl Pacing {
    /// Starts the thread for GPU `ordinal` with `load`.
    ///
    /// # Errors
    /// [`CudaError::Thread`] if the OS refuses a thread.
    pub(crate) fn spawn(
        ordinal: usize,
        launcher: Launcher,
        load: Load,
    ) -> Result<Pacing, CudaError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                load,
                stop: false,
                exited: false,
                error: None,
                kernels: 0,
            }),
            wake: Condvar::new(),
        });
        let worker = Worker {
            shared: Arc::clone(&shared),
            launcher,
        };
        let handle = std::thread::Builder::new()
            .name(format!("gpufill-cuda{ordinal}"))
            .spawn(move || worker.run())
            .map_err(|e| CudaError::Thread(format!("cannot start the launcher thread: {e}")))?;
        Ok(Pacing { shared, handle })
    }

    /// Hands the thread a new load: the next gap and kernel follow it. A gap under way
    /// is re-timed from the end of the last kernel.
    pub(crate) fn set_load(&self, load: Load) {
        self.shared.lock().load = load;
        self.shared.wake.notify_all();
    }

    /// Kernels launched so far.
    pub(crate) fn kernels(&self) -> u64 {
        self.shared.lock().kernels
    }

    /// Whether the thread has exited (stopped, or on an error), so joining is instant.
    pub(crate) fn exited(&self) -> bool {
        self.shared.lock().exited
    }

    /// Asks the thread to stop and waits, until `deadline` at most, for it to exit;
    /// true when it has. It launches nothing after this returns true.
    pub(crate) fn stop_by(&self, deadline: Instant) -> bool {
        let mut state = self.shared.lock();
        state.stop = true;
        self.shared.wake.notify_all();
        while !state.exited {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Stops the thread and joins it. Prompt: the thread only ever waits on the condvar
    /// or in a launch call.
    pub(crate) fn stop(self) -> Stopped {
        {
            self.shared.lock().stop = true;
            self.shared.wake.notify_all();
        }
        let panicked = self.handle.join().is_err();
        let mut state = self.shared.lock();
        let error = state
            .error
            .take()
            .or_else(|| panicked.then(|| CudaError::Thread("the launcher thread panicked".into())));
        Stopped {
            kernels: state.kernels,
            error,
        }
    }
}

/// The thread's side.
struct Worker {
    shared: Arc<Shared>,
    launcher: Launcher,
}

impl Worker {
    fn run(self) {
        let outcome = self.pace();
        if let Err(e) = &outcome {
            tracing::debug!(error = %e, "one-in-flight launcher stopped on an error");
        }
        let mut state = self.shared.lock();
        state.error = outcome.err();
        state.exited = true;
        drop(state);
        self.shared.wake.notify_all();
    }

    /// The cycle, until asked to stop (`Ok`) or a driver call fails.
    fn pace(&self) -> Result<(), CudaError> {
        let l = &self.launcher;
        l.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let ns = u64::try_from(l.kernel.as_nanos()).unwrap_or(u64::MAX);
        // Whatever was queued before we started (a burst) must finish first.
        if self.wait_done(Duration::ZERO, Instant::now())?.is_none() {
            return Ok(());
        }
        loop {
            let Some(width) = self.next_width() else {
                return Ok(());
            };
            launch_spin(&l.stream, &l.func, ns, width)?;
            // The kernel cannot end before this plus its length.
            let launched = Instant::now();
            self.shared.lock().kernels += 1;
            l.event
                .record(&l.stream)
                .map_err(|e| CudaError::driver("cuEventRecord", e))?;
            let Some(ended) = self.wait_done(l.kernel, launched + l.kernel)? else {
                return Ok(());
            };
            if !self.rest(ended) {
                return Ok(());
            }
        }
    }

    /// The width of the next kernel; `None` once asked to stop.
    fn next_width(&self) -> Option<u32> {
        let state = self.shared.lock();
        (!state.stop).then(|| state.load.width.get())
    }

    /// Sleeps `first`, then polls the event with a backoff until the work recorded in
    /// it has finished, or a stop is asked (`None`). Returns the earliest moment the
    /// work can have ended: `earliest`, or the last poll that found it still running
    /// if that was later. The true end lies between that and now; counting the gap
    /// from it keeps the poll's lateness (and the sleep's) out of the duty.
    fn wait_done(&self, first: Duration, earliest: Instant) -> Result<Option<Instant>, CudaError> {
        let mut ended = earliest;
        let mut wait = first;
        let mut attempt = 0;
        loop {
            if !self.pause(wait) {
                return Ok(None);
            }
            let polled = Instant::now();
            let done = self
                .launcher
                .event
                .try_is_complete()
                .map_err(|e| CudaError::driver("cuEventQuery", e))?;
            if done {
                return Ok(Some(ended));
            }
            ended = ended.max(polled);
            wait = backoff(FIRST_POLL, MAX_POLL, attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Waits `length` on the condvar; `false` as soon as a stop is asked.
    fn pause(&self, length: Duration) -> bool {
        let deadline = Instant::now().checked_add(length);
        let mut state = self.shared.lock();
        loop {
            if state.stop {
                return false;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return true;
            }
            state = self.wait(state, left);
        }
    }

    /// Rests the gap after a kernel that has been seen to finish, counted from `ended`
    /// (see [`Worker::wait_done`]) and re-timed whenever the duty changes; `false` as
    /// soon as a stop is asked.
    fn rest(&self, ended: Instant) -> bool {
        let mut state = self.shared.lock();
        loop {
            if state.stop {
                return false;
            }
            // No duty (not expected: an idle load stops the thread) or a gap beyond
            // any clock: wait for a change.
            let until = one_in_flight_gap(state.load.duty.fraction(), self.launcher.kernel)
                .and_then(|gap| ended.checked_add(gap));
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return true;
            }
            state = self.wait(state, left);
        }
    }

    /// Waits on the condvar for `left`, or until woken when `None`.
    fn wait<'a>(
        &self,
        state: MutexGuard<'a, State>,
        left: Option<Duration>,
    ) -> MutexGuard<'a, State> {
        match left {
            Some(left) => {
                self.shared
                    .wake
                    .wait_timeout(state, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => self
                .shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner),
        }
    }
}
