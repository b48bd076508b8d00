//! The pacing thread of [`LaunchShape::OneInFlight`](gpufill_core::LaunchShape): one
//! kernel of ours at a time, then an idle gap, launched from a thread that
//! [`CudaLoad`](crate::CudaLoad) owns.
//!
//! Why a thread: the gaps are a fraction of a millisecond (a 500 us kernel at half duty
//! rests 500 us), far shorter than a loop tick, and the next kernel may start only once
//! the last one has finished, which a tick cannot see in time. Why one kernel at a time:
//! without MPS the GPU time-slices between contexts, and a foreign kernel that arrives
//! while work of ours is *queued* can wait a whole time slice, while one that arrives
//! beside a *single* kernel of ours waits at most what is left of it
//! (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps-issue-16, "Launch
//! shapes" and "Earlier notes").
//!
//! The cycle: launch one kernel of `beside_kernel` at the load's width, record the event
//! after it, sleep the kernel's length and the gap ([`one_in_flight_gap`]) in one go,
//! check the event: finished, launch the next. One wake-up a kernel instead of two (the
//! thread's CPU is its wake-ups), and the sleep's lateness does not add to the gap; the
//! GPU rests the gap less the few microseconds a kernel takes past its length. Still
//! running (another context's time slice delayed it): poll the event with a backoff
//! (20 us doubling to 1 ms; never spinning) until it has finished, then rest the whole
//! gap from then, since someone else is using the GPU. The next launch happens only
//! after the previous kernel was seen to finish, so two of our kernels are never queued
//! at once; before its first launch the thread waits the same way for whatever was
//! queued before it started (a burst), so the promise holds from the first launch on.
//!
//! Timing: the thread keeps Linux's default timer slack of 50 us (lowering it takes
//! `prctl`, and this crate does not depend on libc), so a sleep ends up to about that
//! late, plus the launch and the wake-up, so the on-time falls short of the duty and
//! the controller makes up the shortfall, as it does for bursts. What that and the
//! thread's CPU came to: the same section, "CPU, and what it was traded for".
//!
//! Every wait is on a condvar with a timeout, so a stop wakes the thread at once; it then
//! exits without waiting for its kernel in flight (at most `beside_kernel`), which the
//! shared event still covers: [`CudaLoad::quiesce`](crate::CudaLoad::quiesce) polls it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream};
use gpufill_core::{Load, OthersSign};

use crate::error::CudaError;
use crate::others::OthersWatch;
use crate::plan::{backoff, one_in_flight_gap};
use crate::spin::launch_spin;

/// First wait before polling the event again once the kernel's length has passed.
const FIRST_POLL: Duration = Duration::from_micros(20);
/// Longest wait between polls (a kernel slowed by another context's time slice).
const MAX_POLL: Duration = Duration::from_millis(1);
/// A kernel of ours seen still running this long past its length was held back by
/// another context: someone else is working on the GPU. The thread then launches
/// nothing more until the loop hands it a new load (or [`LATE_PAUSE`] has passed), and
/// the loop pauses at its next tick ([`CudaLoad::others_seen`](crate::CudaLoad)).
///
/// Judged only from a check that found the kernel unfinished (which proves it ended
/// later than that check), never from when our own thread happened to wake, so a late
/// wake-up cannot fake it. 300 us: above how late kernels of ours started beside
/// ResNet-50 requests (a CPU-bound service whose requests lost nothing measurable:
/// docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps-issue-16, "A
/// start-delay sensor"), below the time slice a busy GPU-bound job holds the GPU for
/// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on).
pub(crate) const LATE: Duration = Duration::from_micros(300);
/// How long the thread stays idle after a late kernel if the loop says nothing.
const LATE_PAUSE: Duration = Duration::from_millis(500);

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
    /// The kernels' `yield_ns` (they end at a clock jump longer than this).
    pub yield_ns: u64,
    /// The start events of our kernels and what their timing shows
    /// ([`crate::others`]).
    pub watch: OthersWatch,
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
    /// Kernels whose timing showed another context, or that were held back by one
    /// ([`LATE`]), not yet reported; and the strongest sign among them.
    late: u64,
    sign: Option<OthersSign>,
    /// A new load was handed over since the last late kernel (ends the thread's pause).
    load_changed: bool,
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
    /// Late kernels not yet reported, and the strongest sign among them.
    pub late: u64,
    /// The strongest sign of the late kernels not yet reported.
    pub sign: Option<OthersSign>,
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
                late: 0,
                sign: None,
                load_changed: false,
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
        let mut state = self.shared.lock();
        state.load = load;
        state.load_changed = true;
        drop(state);
        self.shared.wake.notify_all();
    }

    /// Kernels that showed another context since the last call, and the strongest
    /// sign among them.
    pub(crate) fn take_late(&self) -> (u64, Option<OthersSign>) {
        let mut state = self.shared.lock();
        (std::mem::take(&mut state.late), state.sign.take())
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
            late: std::mem::take(&mut state.late),
            sign: state.sign.take(),
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
    fn run(mut self) {
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
    fn pace(&mut self) -> Result<(), CudaError> {
        self.launcher
            .ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let kernel = self.launcher.kernel;
        let ns = u64::try_from(kernel.as_nanos()).unwrap_or(u64::MAX);
        // Whatever was queued before we started (a burst) must finish first.
        if !self.wait_done(Duration::ZERO)? {
            return Ok(());
        }
        loop {
            let Some(width) = self.next_width() else {
                return Ok(());
            };
            let launched = self.launch_one(ns, width)?;
            // One wake-up a kernel: sleep its length and the gap at once, then check
            // that it has finished before the next launch.
            if !self.rest(launched + kernel) {
                return Ok(());
            }
            // Slowed by another context's time slice: poll until it ends; held back
            // past LATE, someone else is working.
            let mut unfinished = false;
            let mut held_back = None;
            if !self.is_done()? {
                unfinished = true;
                let unfinished_at = Instant::now();
                if !self.wait_done(FIRST_POLL)? {
                    return Ok(());
                }
                let past = unfinished_at.saturating_duration_since(launched + kernel);
                held_back = (past >= LATE).then_some(OthersSign::HeldBack {
                    past_us: past.as_secs_f64() * 1e6,
                });
            }
            // Held back, or its timing shows another context's work (a start a context
            // switch late, a run cut short by a preemption): say so, and launch nothing
            // more until the loop answers.
            if let Some(sign) = held_back.or_else(|| self.judge()) {
                if !self.hold_after_late(sign) {
                    return Ok(());
                }
                continue;
            }
            // Merely slowed: rest the whole gap from now.
            if unfinished && !self.rest(Instant::now()) {
                return Ok(());
            }
        }
    }

    /// Launches one kernel between our start and end events; returns when.
    fn launch_one(&mut self, ns: u64, width: u32) -> Result<Instant, CudaError> {
        let l = &mut self.launcher;
        l.watch.before_launch(&l.stream)?;
        launch_spin(&l.stream, &l.func, ns, l.yield_ns, width)?;
        // The kernel cannot end before this plus its length.
        let launched = Instant::now();
        l.event
            .record(&l.stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        l.watch.launched(launched, l.kernel, 1);
        self.shared.lock().kernels += 1;
        Ok(launched)
    }

    /// What the finished kernel's timing shows of another context's work; a timing
    /// that cannot be read shows nothing (the held-back check still works).
    fn judge(&mut self) -> Option<OthersSign> {
        let l = &mut self.launcher;
        match l.watch.judge(&l.event) {
            Ok(judged) => judged.flatten(),
            Err(e) => {
                tracing::debug!(error = %e, "kernel timing unavailable");
                None
            }
        }
    }

    /// Records a late kernel and waits until the loop hands over a new load, or
    /// [`LATE_PAUSE`] has passed; `false` as soon as a stop is asked.
    fn hold_after_late(&self, sign: OthersSign) -> bool {
        let deadline = Instant::now() + LATE_PAUSE;
        let mut state = self.shared.lock();
        state.late += 1;
        state.sign = OthersSign::strongest(state.sign, Some(sign));
        state.load_changed = false;
        self.wait_until(state, |_| Some(deadline), |s| s.load_changed)
    }

    /// The width of the next kernel; `None` once asked to stop.
    fn next_width(&self) -> Option<u32> {
        let state = self.shared.lock();
        (!state.stop).then(|| state.load.width.get())
    }

    /// Sleeps `first`, then polls the event with a backoff until the work recorded in
    /// it has finished (`true`), or a stop is asked (`false`).
    fn wait_done(&self, first: Duration) -> Result<bool, CudaError> {
        let mut wait = first;
        let mut attempt = 0;
        loop {
            if !self.pause(wait) {
                return Ok(false);
            }
            if self.is_done()? {
                return Ok(true);
            }
            wait = backoff(FIRST_POLL, MAX_POLL, attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Whether the work recorded in the event has finished.
    fn is_done(&self) -> Result<bool, CudaError> {
        self.launcher
            .event
            .try_is_complete()
            .map_err(|e| CudaError::driver("cuEventQuery", e))
    }

    /// Waits `length` on the condvar; `false` as soon as a stop is asked.
    fn pause(&self, length: Duration) -> bool {
        let deadline = Instant::now().checked_add(length);
        self.wait_until(self.shared.lock(), |_| deadline, |_| false)
    }

    /// Rests the gap after a kernel, counted from `ended` and re-timed whenever the
    /// duty changes; `false` as soon as a stop is asked.
    fn rest(&self, ended: Instant) -> bool {
        // No duty (not expected: an idle load stops the thread) or a gap beyond any
        // clock: wait for a change.
        let until = |s: &State| {
            one_in_flight_gap(s.load.duty.fraction(), self.launcher.kernel)
                .and_then(|gap| ended.checked_add(gap))
        };
        self.wait_until(self.shared.lock(), until, |_| false)
    }

    /// Waits on the condvar until the deadline `until` gives for the current state has
    /// passed (none: until woken) or `done` holds (`true`); `false` as soon as a stop
    /// is asked. Both are read again after every wake-up.
    fn wait_until(
        &self,
        mut state: MutexGuard<'_, State>,
        until: impl Fn(&State) -> Option<Instant>,
        done: impl Fn(&State) -> bool,
    ) -> bool {
        loop {
            if state.stop {
                return false;
            }
            if done(&state) {
                return true;
            }
            let left = until(&state).map(|u| u.saturating_duration_since(Instant::now()));
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
