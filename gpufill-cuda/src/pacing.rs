//! The pacing thread of [`LaunchShape::OneInFlight`](gpufill_core::LaunchShape) and
//! [`LaunchShape::Gaps`](gpufill_core::LaunchShape): one kernel of ours at a time, then
//! an idle gap, launched from a thread that [`CudaLoad`](crate::CudaLoad) owns. The two
//! shapes share the cycle ([`Cycle`]) and differ in the kernel, the shortest gap and what
//! follows a kernel that met another context.
//!
//! Why a thread: the gaps are a fraction of a millisecond (a 500 us kernel at half duty
//! rests 500 us), far shorter than a loop tick, and the next kernel may start only once
//! the last one has finished, which a tick cannot see in time. Why one kernel at a time:
//! without MPS the GPU time-slices between contexts, and a foreign kernel that arrives
//! while work of ours is *queued* can wait a whole time slice, while one that arrives
//! beside a *single* kernel of ours waits at most what is left of it
//! (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps, "Launch
//! shapes" and "Earlier notes").
//!
//! The cycle: launch one kernel of the cycle's length at the load's width, record the
//! event after it, sleep the kernel's length and the gap ([`Cycle::gap`]) in one go,
//! check the event: finished, launch the next. One wake-up a kernel instead of two (the
//! thread's CPU is its wake-ups), and the sleep's lateness does not add to the gap; the
//! GPU rests the gap less the few microseconds a kernel takes past its length. Still
//! running (another context's time slice delayed it): poll the event with a backoff
//! (20 us doubling to 1 ms; never spinning) until it has finished, then rest the whole
//! gap from then, since someone else is using the GPU. The next launch happens only
//! after the previous kernel was seen to finish, so two of our kernels are never queued
//! at once; before its first launch the thread waits the same way for whatever was
//! queued before it started (a burst, or the last kernel of a thread of the other
//! shape), so the promise holds from the first launch on.
//!
//! After each kernel the thread judges it: held back past [`LATE`], or its timing shows
//! another context ([`crate::others`]: a start a context switch late, a run cut short
//! or long). Then:
//! - **One in flight** (beside a quiet holder): the sign is reported to the loop
//!   ([`CudaLoad::others_seen`](crate::CudaLoad)), which pauses, and the thread launches
//!   nothing until the loop hands it a new load (or [`LATE_PAUSE`] has passed).
//! - **Gaps** (beside live work, `yield.beside_live = "fill_gaps"`): kernels of
//!   [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL) (or longer where the pacer says the
//!   job stays idle a while: [`GapPacer::kernel_for`]), a gap of at least
//!   [`MIN_GAP`](gpufill_core::gaps::MIN_GAP) so that a job that is ready when our
//!   kernel ends gets in before our next launch. Each kernel is also checked
//!   [`LATE_END`] after its end was due: unfinished then, it waited for the job's context
//!   (a second wake-up a kernel: this shape costs more CPU than the others). After a
//!   wait (a hold, a spell the pacer predicted) a probe pair says whether the job ran
//!   in it. What each kernel showed goes to the pacer ([`GapPacer`]), which says when
//!   the next may go and what it charges the job; that goes to the thread's
//!   [`GapReport`]. The hold in force comes from the loop ([`Pacing::set_hold`], from
//!   its `set_gap_hold`; a new hold re-times the wait in progress). Nothing goes to
//!   `others_seen`: the policy does not pause while filling gaps; the loop reads the
//!   report (`gaps_seen`) and sets the hold that keeps its cost estimate under the bound
//!   (`gpufill_core::gaps`).
//!
//! Timing: the thread keeps Linux's default timer slack of 50 us (lowering it takes
//! `prctl`, and this crate does not depend on libc), so a sleep ends up to about that
//! late, plus the launch and the wake-up, so the on-time falls short of the duty and
//! the controller makes up the shortfall, as it does for bursts. What that and the
//! thread's CPU came to: the same section, "CPU, and what it was traded for".
//!
//! Every wait is on a condvar with a timeout, so a stop wakes the thread at once; it then
//! exits without waiting for its kernel in flight (at most one kernel), which the
//! shared event still covers: [`CudaLoad::quiesce`](crate::CudaLoad::quiesce) polls it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream};
use gpufill_core::{GapPacer, GapReport, KernelOutcome, Load, OthersSign, Time};

use crate::error::CudaError;
use crate::others::OthersWatch;
use crate::plan::{Cycle, backoff};
use crate::spin::launch_spin;

/// Filling gaps: idle this much longer than the duty's gap since our last kernel (a hold,
/// a predicted spell), the launcher probes before its next kernel
/// ([`Worker::probe_after_wait`]); shorter idle gaps keep the watch's chain, whose late
/// starts show the job.
const PROBE_AFTER_IDLE: Duration = Duration::from_millis(1);

/// Filling gaps: a kernel of ours not finished this long after its end was due (its
/// launch plus its length) waited for the job's context: for a switch back to ours
/// (136 us on H200s), or for the job's kernel. The kernel's own start-event chain misses
/// most of those beside a launch-bound job (a ResNet-18 step's ~400 short kernels showed
/// one late start a step, `scripts/gap_trace.py`); this check sees a switch that delays
/// our kernel 60 us or more (how many it still misses is not measured). A late wake-up
/// of ours only makes a kernel look earlier, never later.
const LATE_END: Duration = Duration::from_micros(60);

/// Filling gaps: a probe pair after a wait that took longer than this waited for the
/// job's work (a pair alone takes two tiny kernels and their polls, about 0.3-0.5 ms).
const PROBE_HELD_BACK: Duration = Duration::from_millis(1);

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
/// docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps, "A
/// start-delay sensor"), below the time slice a busy GPU-bound job holds the GPU for
/// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on).
pub(crate) const LATE: Duration = Duration::from_micros(300);
/// How long the one-in-flight thread stays idle after a late kernel if the loop says
/// nothing.
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
    /// What it launches: the kernel's length, the gap, and what follows a meeting.
    pub cycle: Cycle,
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
    /// Filling gaps: what our kernels met, not yet reported.
    gaps: GapReport,
    /// Filling gaps: how long to launch nothing after a meeting.
    hold: Duration,
    /// Times the thread slept on the condvar (its CPU is mostly its wake-ups).
    sleeps: u64,
}

impl Shared {
    fn new(load: Load, hold: Duration) -> Shared {
        Shared {
            state: Mutex::new(State {
                load,
                stop: false,
                exited: false,
                error: None,
                kernels: 0,
                late: 0,
                sign: None,
                load_changed: false,
                gaps: GapReport::default(),
                hold,
                sleeps: 0,
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits `length` on the condvar; `false` as soon as a stop is asked.
    fn pause(&self, length: Duration) -> bool {
        let deadline = Instant::now().checked_add(length);
        self.wait_until(|_| deadline, |_| false)
    }

    /// Filling gaps: waits until `pacer` lets a kernel of `kernel` go, asked at `now` on
    /// its clock (zero at `epoch`): a spell of the job's work in progress or predicted, at
    /// least the hold in force after a busy kernel, re-timed whenever the hold changes;
    /// `false` as soon as a stop is asked.
    fn wait_for_launch(
        &self,
        pacer: &GapPacer,
        epoch: Instant,
        now: Time,
        kernel: Duration,
    ) -> bool {
        self.wait_until(
            |s| epoch.checked_add(pacer.next_launch(now, kernel, s.hold).since_epoch()),
            |_| false,
        )
    }

    /// Waits on the condvar until the deadline `until` gives for the current state has
    /// passed (none: until woken) or `done` holds (`true`); `false` as soon as a stop
    /// is asked. Both are read again after every wake-up.
    fn wait_until(
        &self,
        until: impl Fn(&State) -> Option<Instant>,
        done: impl Fn(&State) -> bool,
    ) -> bool {
        self.wait_until_in(self.lock(), until, done)
    }

    /// [`Shared::wait_until`] with the lock already held.
    fn wait_until_in(
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
            state.sleeps += 1;
            state = match left {
                Some(left) => {
                    self.wake
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// What a kernel of ours that showed `sign` (or nothing) tells the gap pacer: a late
/// start only, that the job ran since our previous kernel; held back, that it waited
/// behind the job's queued work; cut short or run long, that the job works now.
fn outcome_of(sign: Option<OthersSign>) -> KernelOutcome {
    match sign {
        None => KernelOutcome::Clear,
        Some(OthersSign::LateStart { .. }) => KernelOutcome::AfterOthers,
        Some(OthersSign::HeldBack { .. }) => KernelOutcome::HeldBack,
        Some(_) => KernelOutcome::Busy,
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
    /// Filling gaps: what its kernels met, not yet reported.
    pub gaps: GapReport,
    /// The error it stopped on, if it did.
    pub error: Option<CudaError>,
}

/// A running (or exited, not yet joined) pacing thread.
pub(crate) struct Pacing {
    shared: Arc<Shared>,
    handle: JoinHandle<()>,
}

impl Pacing {
    /// Starts the thread for GPU `ordinal` with `load`, and `hold` after a meeting
    /// while filling gaps.
    ///
    /// # Errors
    /// [`CudaError::Thread`] if the OS refuses a thread.
    pub(crate) fn spawn(
        ordinal: usize,
        launcher: Launcher,
        load: Load,
        hold: Duration,
    ) -> Result<Pacing, CudaError> {
        let shared = Arc::new(Shared::new(load, hold));
        let kernel = launcher.cycle.kernel();
        let worker = Worker {
            shared: Arc::clone(&shared),
            launcher,
            pacer: GapPacer::new(),
            epoch: Instant::now(),
            last_end: None,
            kernel,
            stretched: 0,
            probes: 0,
            queries: std::cell::Cell::new(0),
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

    /// Filling gaps: how long to launch nothing after a meeting, from the next meeting
    /// on and for a hold under way (re-timed from its meeting).
    pub(crate) fn set_hold(&self, hold: Duration) {
        self.shared.lock().hold = hold;
        self.shared.wake.notify_all();
    }

    /// Filling gaps: what the kernels met since the last call.
    pub(crate) fn take_gaps(&self) -> GapReport {
        std::mem::take(&mut self.shared.lock().gaps)
    }

    /// Kernels that showed another context since the last call (one in flight), and
    /// the strongest sign among them.
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
            gaps: std::mem::take(&mut state.gaps),
            error,
        }
    }
}

/// The thread's side.
struct Worker {
    shared: Arc<Shared>,
    launcher: Launcher,
    /// Filling gaps: when the job works, as learned from what our kernels met.
    pacer: GapPacer,
    /// The pacer's time zero.
    epoch: Instant,
    /// Filling gaps: when our last kernel (or probe pair) was seen to end.
    last_end: Option<Instant>,
    /// The length of the last kernel launched: the cycle's, or while filling gaps the
    /// pacer's ([`GapPacer::kernel_for`]).
    kernel: Duration,
    /// What the thread did, for its last log line: kernels longer than
    /// [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL), probe pairs and event queries.
    stretched: u64,
    probes: u64,
    queries: std::cell::Cell<u64>,
}

impl Worker {
    fn run(mut self) {
        let outcome = self.pace();
        if let Err(e) = &outcome {
            tracing::debug!(error = %e, cycle = self.launcher.cycle.as_str(),
                "pacing thread stopped on an error");
        }
        let mut state = self.shared.lock();
        // Where its CPU went (docs/benchmarks.md, "CPU while filling gaps"):
        // RUST_LOG=gpufill_cuda::pacing=debug.
        tracing::debug!(
            cycle = self.launcher.cycle.as_str(),
            seconds = self.epoch.elapsed().as_secs_f64(),
            kernels = state.kernels,
            stretched = self.stretched,
            probes = self.probes,
            queries = self.queries.get(),
            sleeps = state.sleeps,
            "pacing thread stopped"
        );
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
        // Whatever was queued before we started (a burst) must finish first.
        if !self.wait_done(Duration::ZERO)? {
            return Ok(());
        }
        loop {
            let Some(width) = self.next_width() else {
                return Ok(());
            };
            let kernel = self.next_kernel();
            if self.launcher.cycle == Cycle::Gaps {
                if !self.wait_for_gap(kernel) {
                    return Ok(());
                }
                if self.idle_since_last() {
                    // The pair's verdict may put the next launch off: ask again.
                    if !self.probe_after_wait()? {
                        return Ok(());
                    }
                    continue;
                }
            }
            // The pacer's length may have changed in the wait.
            let kernel = self.next_kernel();
            let launched = self.launch_one(kernel, width)?;
            // Filling gaps: one check just after the kernel's end is due; unfinished then,
            // the job's context was on the GPU ([`LATE_END`]).
            let (ended_late, seen_done) = match self.launcher.cycle {
                Cycle::Gaps => match self.ended_late(launched + kernel)? {
                    Some(late) => (late, !late),
                    None => return Ok(()),
                },
                Cycle::OneInFlight { .. } => (false, false),
            };
            // One wake-up a kernel (two while filling gaps): sleep its length and the gap
            // at once, then check that it has finished before the next launch.
            if !self.rest(launched + kernel) {
                return Ok(());
            }
            // Seen finished at the check after its end, it needs no second look.
            let Some(mut finished) = self.finish(launched + kernel, !seen_done)? else {
                return Ok(());
            };
            if ended_late && finished.sign.is_none() {
                finished.sign = Some(OthersSign::LateStart {
                    late_us: LATE_END.as_secs_f64() * 1e6,
                });
            }
            let go_on = match (finished.sign, self.launcher.cycle) {
                // Another context: say so, and launch nothing more until the loop
                // answers.
                (Some(sign), Cycle::OneInFlight { .. }) => self.hold_after_late(sign),
                // What the kernel met goes to the report and the pacer, which decides
                // when the next one goes (`wait_for_gap`).
                (sign, Cycle::Gaps) => self.gap_done(launched, sign, finished.slowed),
                // Merely slowed: rest the whole gap from now.
                (None, _) => !finished.slowed || self.rest(Instant::now()),
            };
            if !go_on {
                return Ok(());
            }
        }
    }

    /// Waits for the kernel planned to end at `planned_end` to finish, if the check
    /// after its rest found it still running (slowed by another context's time slice),
    /// and judges it: held back past [`LATE`], or its timing shows another context's
    /// work (a start a context switch late, a run cut short by a preemption or long).
    /// `None` once asked to stop. `may_run` is false where a check after its end was
    /// due (filling gaps) already saw it finished: no driver call then.
    fn finish(
        &mut self,
        planned_end: Instant,
        may_run: bool,
    ) -> Result<Option<Finished>, CudaError> {
        let mut held_back = None;
        let slowed = may_run && !self.is_done()?;
        if slowed {
            let unfinished_at = Instant::now();
            if !self.wait_done(FIRST_POLL)? {
                return Ok(None);
            }
            let past = unfinished_at.saturating_duration_since(planned_end);
            held_back = (past >= LATE).then_some(OthersSign::HeldBack {
                past_us: past.as_secs_f64() * 1e6,
            });
        }
        let sign = held_back.or_else(|| self.judge());
        Ok(Some(Finished { slowed, sign }))
    }

    /// The length of the next kernel: the cycle's, or while filling gaps the pacer's
    /// (stretched where it predicts the job idle for a while yet).
    fn next_kernel(&self) -> Duration {
        match self.launcher.cycle {
            Cycle::Gaps => self.pacer.kernel_for(self.time(Instant::now())),
            cycle => cycle.kernel(),
        }
    }

    /// Launches one kernel of `kernel` between our start and end events; returns when.
    fn launch_one(&mut self, kernel: Duration, width: u32) -> Result<Instant, CudaError> {
        self.kernel = kernel;
        self.stretched += u64::from(kernel > gpufill_core::gaps::GAP_KERNEL);
        let ns = u64::try_from(kernel.as_nanos()).unwrap_or(u64::MAX);
        let l = &mut self.launcher;
        l.watch.before_launch(&l.stream)?;
        launch_spin(&l.stream, &l.func, ns, l.yield_ns, width)?;
        // The kernel cannot end before this plus its length.
        let launched = Instant::now();
        l.event
            .record(&l.stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        l.watch.launched(launched, kernel, 1);
        let mut state = self.shared.lock();
        state.kernels += 1;
        Ok(launched)
    }

    /// What the finished kernel's timing shows of another context's work; a timing
    /// that cannot be read shows nothing (the held-back check still works).
    fn judge(&mut self) -> Option<OthersSign> {
        let l = &mut self.launcher;
        match l.watch.judge_finished(&l.event) {
            Ok(judged) => judged,
            Err(e) => {
                tracing::debug!(error = %e, "kernel timing unavailable");
                None
            }
        }
    }

    /// One in flight: records a late kernel and waits until the loop hands over a new
    /// load, or [`LATE_PAUSE`] has passed; `false` as soon as a stop is asked.
    fn hold_after_late(&self, sign: OthersSign) -> bool {
        let deadline = Instant::now() + LATE_PAUSE;
        let mut state = self.shared.lock();
        state.late += 1;
        state.sign = OthersSign::strongest(state.sign, Some(sign));
        state.load_changed = false;
        self.shared
            .wait_until_in(state, |_| Some(deadline), |s| s.load_changed)
    }

    /// Filling gaps: a kernel launched at `launched` has ended, having met another
    /// context (`sign`) or not. A meeting is counted; the pacer learns whether the job
    /// was busy (held back, cut short, run long: it works now) or had come and gone (a
    /// late start only). A kernel merely slowed rests the whole gap from now. `false` as
    /// soon as a stop is asked.
    fn gap_done(&mut self, launched: Instant, sign: Option<OthersSign>, slowed: bool) -> bool {
        let outcome = outcome_of(sign);
        if let Some(sign) = sign {
            tracing::trace!(%sign, "filling gaps: met another context");
        }
        let ended = self.report(launched, outcome);
        !slowed || sign.is_some() || self.rest(ended)
    }

    /// Filling gaps: waits until the pacer lets the next kernel of `kernel` go (the job's
    /// spell in progress or predicted, at least the hold in force after a busy kernel,
    /// re-timed when the hold changes); `false` as soon as a stop is asked.
    fn wait_for_gap(&self, kernel: Duration) -> bool {
        let now = self.time(Instant::now());
        self.shared
            .wait_for_launch(&self.pacer, self.epoch, now, kernel)
    }

    /// Filling gaps: whether the kernel due to end at `due` had not finished [`LATE_END`]
    /// after it; `None` once asked to stop.
    fn ended_late(&self, due: Instant) -> Result<Option<bool>, CudaError> {
        let at = due + LATE_END;
        if !self
            .shared
            .pause(at.saturating_duration_since(Instant::now()))
        {
            return Ok(None);
        }
        Ok(Some(!self.is_done()?))
    }

    /// Filling gaps: whether our launcher has been idle [`PROBE_AFTER_IDLE`] longer than
    /// the duty's gap since its last kernel ended (a hold, or a spell the pacer
    /// predicted).
    fn idle_since_last(&self) -> bool {
        let duty = self.shared.lock().load.duty.fraction();
        let gap = (self.launcher.cycle)
            .gap_after(duty, self.kernel)
            .unwrap_or(Duration::ZERO);
        self.last_end
            .is_some_and(|end| end.elapsed() > gap + PROBE_AFTER_IDLE)
    }

    /// Filling gaps, after a wait: a probe pair ([`crate::others::probe`]) says whether
    /// the job ran while we waited. The first kernel after a wait cannot say it itself:
    /// after an idle spell of ours it starts late whoever ran, so its watch starts a new
    /// chain and judges no late start. The pacer hears "someone" as a kernel after
    /// others; "nobody" only as a look ([`GapPacer::looked`]). `false` once asked to
    /// stop.
    fn probe_after_wait(&mut self) -> Result<bool, CudaError> {
        let launched = Instant::now();
        self.probes += 1;
        let l = &mut self.launcher;
        let ran = crate::others::probe(&l.stream, &l.func, &mut l.watch, &l.event)?;
        if ran {
            // A pair held back (it took longer than a look can alone) found the job at
            // work now; otherwise it worked somewhere in our wait.
            let outcome = if launched.elapsed() > PROBE_HELD_BACK {
                KernelOutcome::HeldBack
            } else {
                KernelOutcome::AfterOthers
            };
            self.report(launched, outcome);
        } else {
            // "Nobody" is not believed: a pair launched while the job works in its
            // launch gaps can say it (seen beside a ResNet-18 step). The next kernel,
            // judged against the pair's end, says whether the job works.
            let ended = Instant::now();
            self.last_end = Some(ended);
            self.pacer.looked(self.time(ended));
        }
        Ok(!self.shared.lock().stop)
    }

    /// Tells the pacer that a kernel (or probe pair) launched at `launched` has ended now
    /// with `outcome`, and adds what it charges to the report (one lock of the shared
    /// state); returns when it ended.
    fn report(&mut self, launched: Instant, outcome: KernelOutcome) -> Instant {
        let ended = Instant::now();
        self.last_end = Some(ended);
        let (launched_at, ended_at) = (self.time(launched), self.time(ended));
        let mut state = self.shared.lock();
        self.pacer.set_hold(state.hold);
        let report = self.pacer.kernel_done(launched_at, ended_at, outcome);
        state.gaps += report;
        let hold = state.hold;
        drop(state);
        // One line a kernel, for `scripts/gap_trace.py` (RUST_LOG=gpufill_cuda::pacing=trace):
        // when it was launched (Unix us) and ended, the length asked of our last kernel
        // (stretched or not), what it met, what the pacer learned and the hold in force.
        if tracing::enabled!(tracing::Level::TRACE) {
            let (spell, period) = self.pacer.learned();
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let since = ended.saturating_duration_since(launched);
            tracing::trace!(
                launched_unix_us = (unix.saturating_sub(since)).as_micros() as u64,
                ran_us = since.as_micros() as u64,
                kernel_us = self.kernel.as_micros() as u64,
                outcome = ?outcome,
                met = report.met,
                spell_us = spell.map_or(0, |d| d.as_micros() as u64),
                period_us = period.map_or(0, |d| d.as_micros() as u64),
                hold_us = hold.as_micros() as u64,
                "gap kernel"
            );
        }
        ended
    }

    /// `at` on the pacer's clock.
    fn time(&self, at: Instant) -> Time {
        Time::from_duration(at.saturating_duration_since(self.epoch))
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
            if !self.shared.pause(wait) {
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
        self.queries.set(self.queries.get() + 1);
        self.launcher
            .event
            .try_is_complete()
            .map_err(|e| CudaError::driver("cuEventQuery", e))
    }

    /// Rests the gap after a kernel, counted from `ended` and re-timed whenever the
    /// duty changes; `false` as soon as a stop is asked.
    fn rest(&self, ended: Instant) -> bool {
        // No duty (not expected: an idle load stops the thread) or a gap beyond any
        // clock: wait for a change.
        let (cycle, kernel) = (self.launcher.cycle, self.kernel);
        let until = |s: &State| {
            cycle
                .gap_after(s.load.duty.fraction(), kernel)
                .and_then(|gap| ended.checked_add(gap))
        };
        self.shared.wait_until(until, |_| false)
    }
}

/// A kernel seen to finish, and what it showed.
struct Finished {
    /// The check after its rest found it still running.
    slowed: bool,
    /// What it showed of another context, if anything.
    sign: Option<OthersSign>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::{Duty, Width};

    const MS: Duration = Duration::from_millis(1);

    fn load() -> Load {
        Load {
            duty: Duty::clamped(0.3),
            width: Width::ONE_WARP,
        }
    }

    /// Waits as the thread does after a busy kernel that ended at `from` (the pacer knows
    /// nothing else of the job): the hold in force from then.
    fn hold_from(shared: &Shared, from: Instant) -> bool {
        let mut pacer = GapPacer::new();
        pacer.kernel_done(Time::ZERO, Time::ZERO, KernelOutcome::Busy);
        shared.wait_for_launch(&pacer, from, Time::ZERO, Duration::ZERO)
    }

    #[test]
    fn each_sign_tells_the_pacer_what_the_job_was_doing() {
        assert_eq!(outcome_of(None), KernelOutcome::Clear);
        let late = OthersSign::LateStart { late_us: 140.0 };
        assert_eq!(outcome_of(Some(late)), KernelOutcome::AfterOthers);
        let long = OthersSign::RanLong { extra_us: 130.0 };
        assert_eq!(outcome_of(Some(long)), KernelOutcome::Busy);
        let short = OthersSign::CutShort { short_us: 60.0 };
        assert_eq!(outcome_of(Some(short)), KernelOutcome::Busy);
        let held = OthersSign::HeldBack { past_us: 900.0 };
        assert_eq!(outcome_of(Some(held)), KernelOutcome::HeldBack);
    }

    #[test]
    fn a_hold_launches_nothing_for_its_length() {
        let shared = Shared::new(load(), 30 * MS);
        let from = Instant::now();
        assert!(hold_from(&shared, from));
        let took = from.elapsed();
        assert!(took >= 30 * MS, "{took:?}");
        // Already over: returns at once.
        assert!(hold_from(&shared, from));
    }

    #[test]
    fn a_new_hold_retimes_the_wait_in_progress_from_its_meeting() {
        let shared = Arc::new(Shared::new(load(), Duration::from_secs(10)));
        let from = Instant::now();
        let waiter = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || hold_from(&shared, from))
        };
        std::thread::sleep(20 * MS);
        let pacing_side = Pacing {
            shared: Arc::clone(&shared),
            handle: std::thread::spawn(|| {}),
        };
        // Shorter than what has passed already: the wait ends at once.
        pacing_side.set_hold(10 * MS);
        assert!(waiter.join().unwrap());
        let took = from.elapsed();
        assert!(took >= 20 * MS && took < Duration::from_secs(5), "{took:?}");
        // And a longer one lengthens the next wait.
        pacing_side.set_hold(40 * MS);
        let from = Instant::now();
        assert!(hold_from(&shared, from));
        assert!(from.elapsed() >= 40 * MS);
    }

    #[test]
    fn a_stop_ends_a_hold_at_once() {
        let shared = Arc::new(Shared::new(load(), Duration::from_secs(10)));
        let waiter = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || hold_from(&shared, Instant::now()))
        };
        std::thread::sleep(10 * MS);
        let asked = Instant::now();
        shared.lock().stop = true;
        shared.wake.notify_all();
        assert!(!waiter.join().unwrap(), "a stopped hold says so");
        assert!(asked.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_gap_report_is_taken_once_and_a_stopped_thread_hands_over_the_rest() {
        let pacing = Pacing {
            shared: Arc::new(Shared::new(load(), 5 * MS)),
            handle: std::thread::spawn(|| {}),
        };
        let mut state = pacing.shared.lock();
        state.gaps.kernels = 7;
        state.gaps += GapPacer::new().kernel_done(Time::ZERO, Time::ZERO, KernelOutcome::HeldBack);
        drop(state);
        let first = pacing.take_gaps();
        assert_eq!((first.kernels, first.met, first.held_back), (8, 1, 1));
        assert_eq!(pacing.take_gaps(), GapReport::default(), "taken once");
        pacing.shared.lock().gaps.kernels = 3;
        let stopped = pacing.stop();
        assert_eq!(stopped.gaps.kernels, 3);
        assert!(stopped.error.is_none());
    }
}
