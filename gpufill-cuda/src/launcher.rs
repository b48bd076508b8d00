//! [`CudaLoad`]: turns a [`Load`] into spin kernels in one of three shapes
//! ([`LaunchShape`]): bursts, one per period, launched from the caller's thread at
//! [`LoadSource::launch_due`]; or one kernel at a time, launched by a pacing thread of
//! ours ([`crate::pacing`]), either in flight beside a quiet process
//! ([`LaunchShape::OneInFlight`], with [`LauncherSettings::beside_kernel`]) or filling
//! the gaps of live work ([`LaunchShape::Gaps`]: kernels of
//! [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL), gaps of at least
//! [`MIN_GAP`](gpufill_core::gaps::MIN_GAP), the hold of [`LoadSource::set_gap_hold`]
//! after each kernel that met another context, and what they met reported by
//! [`LoadSource::gaps_seen`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream, result, sys};
use cudarc::nvrtc::Ptx;
use gpufill_core::{
    Clock, DeviceError, ErrorKind, GapReport, LaunchShape, Load, LoadSource, SystemClock, Time,
};

use crate::device::handle;
use crate::error::CudaError;
use crate::graphs::KernelGraphs;
use crate::others::{self, OthersWatch};
use crate::pacing::{Launcher, Pacing};
use crate::plan::{Burst, Cycle, Pace, Pacer, backoff};
use crate::ptx::{SPIN_PTX, SpinKernel};
use crate::spin::{NEVER_YIELD, YIELD_JUMP, launch_spin};
use gpufill_core::OthersSign;

/// First wait before polling queued work again while draining (see [`backoff`]).
const FIRST_POLL: Duration = Duration::from_micros(50);
/// Longest wait between polls while draining.
const MAX_POLL: Duration = Duration::from_millis(1);
/// How long dropping a [`CudaLoad`] waits for its queued kernels (at most one period
/// is ever queued) before it releases the context anyway.
const DRAIN_ON_DROP: Duration = Duration::from_secs(2);
/// How long a probe waits for our own queued work to finish before it gives up (and
/// counts as someone there).
const PROBE_DRAIN: Duration = Duration::from_millis(100);
/// After this many groups in a row cut short, the early end on a clock jump is taken
/// to misfire on this GPU (a coarse `%globaltimer`) and turned off.
const CUT_SHORT_IN_A_ROW: u32 = 20;
/// The warm-up kernel run when a context opens, so that the first probe has a kernel
/// of ours to compare with.
const WARM_UP: Duration = Duration::from_micros(10);

/// How the launcher shapes the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LauncherSettings {
    /// One burst per period. 50 ms divides NVML's utilization sample, as measured, into
    /// whole bursts, so every sample sees the same on-time: NVML then reads the duty
    /// exactly, where a 40 ms period read several points off depending on the phase
    /// (docs/benchmarks.md#launching-from-the-loops-thread-cpu-and-the-50-ms-defaults, "The
    /// period must suit NVML's reading").
    /// The caller's ticks should divide it (see [`Pacer`]). At most one period of our
    /// kernels is queued, so it also bounds how long a newcomer can find our work on the
    /// GPU after the check that missed it.
    pub period: Duration,
    /// The longest single kernel: a burst's on-time is split into kernels of at most
    /// this. By default the period, so each burst is one kernel: each launch costs CPU
    /// (most of the loop's, at 2 ms kernels), and the length of our kernels does not
    /// change what another context waits: without MPS a kernel of ours is preempted at
    /// the end of a time slice, and the spin kernel then ends
    /// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on).
    pub max_kernel: Duration,
    /// Beside quiet holders of a context ([`LaunchShape::OneInFlight`]): `None` (the
    /// default) launches the same bursts as on a GPU of our own; `Some(length)` one
    /// kernel of that length at a time from a pacing thread, so that the holder's first
    /// request after a dormant spell waits at most `length` instead of up to a time
    /// slice, at a wake-up per kernel (`duty / length` a second; what that cost at
    /// 500 us: docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps,
    /// "CPU, and what it was traded for"). [`LaunchShape::Gaps`] does not use it: it
    /// always runs the pacing thread, with kernels of
    /// [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL).
    pub beside_kernel: Option<Duration>,
    /// Bursts as kernels of this length replayed from CUDA graphs (`graphs.rs`):
    /// for MPS, where a GPU-bound client's block can wait for the SM our kernel holds
    /// for as long as our kernel runs. `None` (the default): kernels of up to
    /// `max_kernel`, each launched. Needs `own_stream` (the legacy default stream cannot
    /// be captured); ignored without it.
    pub graph_kernel: Option<Duration>,
    /// Launch on a lowest-priority non-blocking stream of our own (`true`), or on the
    /// context's default stream (`false`, to measure what the extra stream costs).
    pub own_stream: bool,
    /// The kernel launched: `spin` or `spin_sleep` (same residency, fewer issue slots).
    pub kernel: SpinKernel,
}

impl Default for LauncherSettings {
    fn default() -> Self {
        LauncherSettings {
            period: Duration::from_millis(50),
            max_kernel: Duration::from_millis(50),
            beside_kernel: None,
            graph_kernel: None,
            own_stream: true,
            kernel: SpinKernel::default(),
        }
    }
}

impl LauncherSettings {
    /// Checks the ranges: a period from 1 ms to 1 s, the longest kernel from 10 us to
    /// 1 s (a burst never runs longer than its on-time anyway), the beside kernel from
    /// 10 us to the period.
    ///
    /// # Errors
    /// [`CudaError::Settings`] naming the value out of range.
    pub fn validate(&self) -> Result<(), CudaError> {
        let ms = Duration::from_millis;
        if !(ms(1)..=ms(1000)).contains(&self.period) {
            return Err(CudaError::Settings(format!(
                "period must be between 1 ms and 1 s, got {:?}",
                self.period
            )));
        }
        if !(Duration::from_micros(10)..=ms(1000)).contains(&self.max_kernel) {
            return Err(CudaError::Settings(format!(
                "max kernel must be between 10 us and 1 s, got {:?}",
                self.max_kernel
            )));
        }
        if let Some(beside) = self.beside_kernel
            && !(Duration::from_micros(10)..=self.period).contains(&beside)
        {
            return Err(CudaError::Settings(format!(
                "beside kernel (one-in-flight kernel length) must be between 10 us and the \
                 period ({:?}), got {:?}",
                self.period, beside
            )));
        }
        if let Some(graph) = self.graph_kernel
            && !(Duration::from_micros(10)..=self.period).contains(&graph)
        {
            return Err(CudaError::Settings(format!(
                "graph kernel (MPS kernel length) must be between 10 us and the period \
                 ({:?}), got {:?}",
                self.period, graph
            )));
        }
        Ok(())
    }
}

/// Counters for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Kernels submitted, in either shape.
    pub kernels_launched: u64,
    /// Periods in which kernels were submitted ([`LaunchShape::Bursts`]).
    pub bursts: u64,
    /// Kernels of the pacing thread seen held back by another context (reported
    /// through `others_seen`).
    pub late_kernels: u64,
    /// Groups of our kernels (bursts, one-in-flight kernels) whose timing showed
    /// another context's work: a start a context switch late, or a run cut short.
    pub others_seen: u64,
    /// Bursts whose start the host stalled on (the record of its start event took
    /// [`gpufill_core::kernel_timing::SLOW_RECORD`] longer than usual): their start can
    /// only look early, so another context's switch before them may go unseen.
    pub stalled_starts: u64,
    /// Probes run, and how many found that someone had run since our previous kernel.
    pub probes: u64,
    /// Probes that found someone.
    pub probes_found: u64,
    /// Kernels submitted one at a time by the pacing thread
    /// ([`LaunchShape::OneInFlight`] and [`LaunchShape::Gaps`]); also counted in
    /// `kernels_launched`.
    pub one_in_flight: u64,
    /// Graph launches ([`LauncherSettings::graph_kernel`]); their kernels are counted in
    /// `kernels_launched`.
    pub graph_launches: u64,
    /// Periods that launched nothing though the duty asked for work: the previous burst
    /// was still running past its plan, or no call came in the whole period.
    pub skipped_periods: u64,
}

/// Device memory as the driver reports it to our context (`cuMemGetInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Free device memory in bytes, for everyone.
    pub free_bytes: u64,
    /// Device memory in bytes.
    pub total_bytes: u64,
}

/// The load source for one GPU: spin kernels, in bursts from the caller's thread or one
/// at a time from a pacing thread of ours.
///
/// [`LoadSource::set_load`] records the load. In [`LaunchShape::Bursts`] (the default),
/// [`LoadSource::launch_due`], called by the fill loop at every tick right after it read
/// the process list, launches the burst of a period that has begun, and nothing runs
/// between calls: no kernel can start on a decision older than the tick.
///
/// In [`LaunchShape::OneInFlight`] (set with [`LoadSource::set_shape`] while the loop
/// fills beside a process that holds a context but is quiet) a pacing thread, started
/// by `launch_due` with a non-idle load and owned by this value, launches one kernel of
/// [`LauncherSettings::beside_kernel`] at a time with an idle gap after each
/// ([`plan::one_in_flight_gap`](crate::plan::one_in_flight_gap); the crate docs say
/// why); the gaps are far shorter than a tick. The newcomer check still
/// happens at every tick: a loop that sees a reason to yield sets the idle load, which
/// stops the thread at once (within the tick), and what is left of ours on the GPU is
/// the one kernel in flight, at most `beside_kernel`.
///
/// In [`LaunchShape::Gaps`] (beside live work, `yield.beside_live = "fill_gaps"`) the
/// same thread runs with or without a `beside_kernel`: kernels of
/// [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL), gaps of at least
/// [`MIN_GAP`](gpufill_core::gaps::MIN_GAP), and after each kernel that met another
/// context the hold of [`LoadSource::set_gap_hold`]; what they met is taken with
/// [`LoadSource::gaps_seen`] (the `pacing` module has the cycle).
///
/// Dropping it stops the thread, waits for our queued kernels and releases the context.
pub struct CudaLoad {
    ordinal: usize,
    settings: LauncherSettings,
    stack_limit: usize,
    clock: SystemClock,
    load: Load,
    pacer: Pacer,
    /// Kernels were launched since the event last showed them all finished.
    pending: bool,
    /// Periods skipped because the previous burst ran past its plan.
    skipped: u64,
    stats: LaunchStats,
    /// The error that broke the context; every later call returns it.
    broken: Option<CudaError>,
    /// How kernels are laid out; bursts until [`LoadSource::set_shape`] says otherwise.
    shape: LaunchShape,
    /// The pacing thread (one in flight, or filling gaps), while one runs (or has
    /// exited and is not yet joined).
    pacing: Option<Pacing>,
    /// Late kernels of a stopped pacing thread not yet reported by `others_seen`, and
    /// the strongest sign among them.
    late_unreported: u64,
    late_sign: Option<OthersSign>,
    /// What the kernels of a stopped gap-filling thread met, not yet reported by
    /// `gaps_seen`.
    gaps_unreported: GapReport,
    /// The hold after a meeting while filling gaps ([`LoadSource::set_gap_hold`]),
    /// handed to every pacing thread.
    gap_hold: Duration,
    /// The error a pacing thread stopped on, returned (and checked) at the next call.
    fault: Option<CudaError>,
    /// The start events of our bursts and what their timing shows.
    watch: OthersWatch,
    /// The strongest sign of another context that our bursts showed since the last
    /// `others_seen`.
    seen: Option<OthersSign>,
    /// Groups cut short in a row (see [`CUT_SHORT_IN_A_ROW`]).
    cut_in_a_row: u32,
    /// The `yield_ns` argument of our kernels ([`YIELD_JUMP`], or never once it misfired).
    yield_ns: u64,
    /// Judging a burst's timing failed once (warned once).
    timing_failed: bool,
    /// With [`LauncherSettings::graph_kernel`] (and our own stream): the graphs bursts
    /// are replayed from.
    graphs: Option<KernelGraphs>,
    // Dropped in this order, after the thread is joined and the drain in `Drop::drop`:
    // the event (shared with the thread while it runs), the function (and its module),
    // the stream, then our hold on the context.
    event: Arc<CudaEvent>,
    func: CudaFunction,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl CudaLoad {
    /// Opens GPU `ordinal`: retains its primary context with blocking sync, sets the
    /// stack limit to 0, loads the spin kernel, and creates our stream and event. Idle
    /// until the first [`LoadSource::set_load`].
    ///
    /// # Errors
    /// [`CudaError::NoDriver`] without a driver (checked first: no panic), invalid
    /// settings, a missing device, or the failed driver call.
    pub fn open(ordinal: usize, settings: LauncherSettings) -> Result<CudaLoad, CudaError> {
        settings.validate()?;
        let device = handle(ordinal)?;
        set_primary_flags(device)?;
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| CudaError::driver("cuDevicePrimaryCtxRetain", e))?;
        let stack_limit = zero_stack(&ctx);
        // SAFETY: event tracking only guards `CudaSlice` use across streams; we create
        // no slices (no device allocations at all), so there is nothing to track, and
        // leaving it on would make stream creation synchronize the context.
        unsafe { ctx.disable_event_tracking() };
        ctx.bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let module = ctx
            .load_module(Ptx::from_src(SPIN_PTX))
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        let func = module
            .load_function(settings.kernel.entry())
            .map_err(|e| CudaError::driver("cuModuleGetFunction", e))?;
        if let Ok(local @ 1..) = func.local_size_bytes() {
            tracing::warn!(
                local,
                "spin kernel uses local memory: the stack limit will grow"
            );
        }
        let stream = if settings.own_stream {
            // Lower numbers are higher priorities; `least` is the lowest (0, the
            // default). Priorities order work inside our context only.
            let (least, _greatest) = result::stream::get_priority_range()
                .map_err(|e| CudaError::driver("cuCtxGetStreamPriorityRange", e))?;
            ctx.new_stream_with_priority(least)
                .map_err(|e| CudaError::driver("cuStreamCreateWithPriority", e))?
        } else {
            ctx.default_stream()
        };
        // With timing (our kernels' timing shows others' work: crate::others), and no
        // blocking sync: we only ever query it, never wait on it, so completing it
        // needs no interrupt and wakes no driver thread.
        let event = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map(Arc::new)
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        let watch = OthersWatch::new(&stream)?;
        // One tiny kernel now: a later probe asks whether anyone ran since our previous
        // kernel, and a context's very first kernel starts late for reasons of its own.
        launch_spin(
            &stream,
            &func,
            u64::try_from(WARM_UP.as_nanos()).unwrap_or(u64::MAX),
            NEVER_YIELD,
            1,
        )?;
        event
            .record(&stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        tracing::info!(gpu = ordinal, stack_limit, ?settings, "opened");
        Ok(CudaLoad {
            ordinal,
            settings,
            stack_limit,
            clock: SystemClock::new(),
            load: Load::IDLE,
            pacer: Pacer::new(settings.period),
            // The warm-up kernel.
            pending: true,
            skipped: 0,
            stats: LaunchStats::default(),
            broken: None,
            shape: LaunchShape::default(),
            pacing: None,
            late_unreported: 0,
            late_sign: None,
            gaps_unreported: GapReport::default(),
            gap_hold: gpufill_core::gaps::MIN_HOLD,
            fault: None,
            watch,
            seen: None,
            cut_in_a_row: 0,
            yield_ns: u64::try_from(YIELD_JUMP.as_nanos()).unwrap_or(NEVER_YIELD),
            timing_failed: false,
            graphs: settings
                .graph_kernel
                .filter(|_| settings.own_stream)
                .map(KernelGraphs::new),
            event,
            func,
            stream,
            ctx,
        })
    }

    /// The CUDA ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The settings it was opened with.
    pub fn settings(&self) -> LauncherSettings {
        self.settings
    }

    /// The per-thread stack size the context ended up with, in bytes (0 when the
    /// driver accepted our request; each byte costs threads x SMs of device memory).
    pub fn stack_limit(&self) -> usize {
        self.stack_limit
    }

    /// Counters since opening.
    pub fn stats(&self) -> LaunchStats {
        let running = self.pacing.as_ref().map_or(0, Pacing::kernels);
        LaunchStats {
            stalled_starts: self.watch.stalled_starts,
            kernels_launched: self.stats.kernels_launched + running,
            one_in_flight: self.stats.one_in_flight + running,
            skipped_periods: self.skipped + self.pacer.missed(),
            ..self.stats
        }
    }

    /// The shape in force ([`LoadSource::set_shape`]).
    pub fn shape(&self) -> LaunchShape {
        self.shape
    }

    /// What the pacing thread launches in the shape in force; `None`: bursts. Filling
    /// gaps always runs the thread; beside quiet holders it takes a
    /// [`LauncherSettings::beside_kernel`] (without one, bursts there too).
    fn paced(&self) -> Option<Cycle> {
        match self.shape {
            LaunchShape::Bursts => None,
            LaunchShape::OneInFlight => self
                .settings
                .beside_kernel
                .map(|kernel| Cycle::OneInFlight { kernel }),
            LaunchShape::Gaps => Some(Cycle::Gaps),
        }
    }

    /// Free and total device memory, seen from our context.
    ///
    /// # Errors
    /// The failed driver call.
    pub fn memory_info(&self) -> Result<MemoryInfo, CudaError> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| CudaError::driver("cuMemGetInfo", e))?;
        Ok(MemoryInfo {
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    /// Waits until no kernel of ours is queued or running, for at most `timeout`,
    /// polling (the event has no blocking sync). Returns whether the GPU is free of our
    /// work. Bursts start only in [`LoadSource::launch_due`] and about one burst of
    /// them is queued at most (see [`Pacer`]), so this takes at most about its on-time,
    /// `duty x period` (measured: docs/benchmarks.md#launching-from-the-loops-thread-cpu-and-the-50-ms-defaults,
    /// "At the defaults").
    ///
    /// A pacing thread is stopped first (the next `launch_due` with a load starts
    /// another), so this waits for its one kernel in flight, at most
    /// [`LauncherSettings::beside_kernel`] (or [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL)).
    pub fn quiesce(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if let Some(pacing) = &self.pacing
            && !pacing.stop_by(deadline)
        {
            return false;
        }
        let mut attempt = 0;
        loop {
            match self.event.try_is_complete() {
                Ok(true) => return true,
                Ok(false) => {}
                // A broken context runs nothing any more.
                Err(_) => return true,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(backoff(FIRST_POLL, MAX_POLL, attempt).min(left));
            attempt = attempt.saturating_add(1);
        }
    }

    /// Launches `burst` as back-to-back kernels of `width` one-warp blocks between our
    /// start event and the end event (their timing: [`crate::others`]); with graphs, as
    /// the same on-time in kernels of the graphs' length.
    fn launch(&mut self, burst: Burst, width: u32) -> Result<(), CudaError> {
        // The previous burst has finished (the pacer saw to it): judge it first.
        self.judge_pending();
        if let Some(mut graphs) = self.graphs.take() {
            let outcome = self.launch_graphs(&mut graphs, burst, width);
            self.graphs = Some(graphs);
            return outcome;
        }
        let ns = u64::try_from(burst.kernel.as_nanos()).unwrap_or(u64::MAX);
        self.watch.before_launch(&self.stream)?;
        let mut outcome = Ok(());
        let mut launched = 0u32;
        let mut first_at = None;
        for _ in 0..burst.count {
            if let Err(e) = launch_spin(&self.stream, &self.func, ns, self.yield_ns, width) {
                outcome = Err(e);
                break;
            }
            first_at.get_or_insert_with(Instant::now);
            launched += 1;
        }
        if let Some(at) = first_at {
            outcome = outcome.and(self.launched(at, burst.kernel, launched));
        }
        tracing::trace!(
            kernels = launched,
            kernel_us = burst.kernel.as_micros() as u64,
            "burst"
        );
        outcome
    }

    /// [`CudaLoad::launch`] from `graphs`: captures what this burst needs first (before
    /// the start event), then replays.
    fn launch_graphs(
        &mut self,
        graphs: &mut KernelGraphs,
        burst: Burst,
        width: u32,
    ) -> Result<(), CudaError> {
        let count = graphs.kernels_for(burst.count, burst.kernel);
        if count == 0 {
            return Ok(());
        }
        graphs.prepare(&self.stream, &self.func, count, self.yield_ns, width)?;
        self.watch.before_launch(&self.stream)?;
        let replayed = graphs.launch(count);
        self.stats.graph_launches += u64::from(replayed.graphs);
        match replayed.first_returned {
            Some(at) => replayed
                .outcome
                .and(self.launched(at, graphs.kernel(), replayed.kernels)),
            None => replayed.outcome,
        }
    }

    /// Counts a group of `launched` kernels of `kernel` whose first launch returned at
    /// `at`, and records the end event behind it.
    fn launched(&mut self, at: Instant, kernel: Duration, launched: u32) -> Result<(), CudaError> {
        self.pending = true;
        self.stats.kernels_launched += u64::from(launched);
        self.stats.bursts += 1;
        let recorded = self
            .event
            .record(&self.stream)
            .map_err(|e| CudaError::driver("cuEventRecord", e));
        if recorded.is_ok() {
            self.watch.launched(at, kernel * launched, launched);
        }
        recorded
    }

    /// Judges the last burst once it has finished: counts it in `seen` when its timing
    /// shows another context's work. A failed query is left for the next launch to
    /// meet. Turns the early end off after [`CUT_SHORT_IN_A_ROW`] bursts in a row cut
    /// short (on such a GPU the clock jumps on its own).
    fn judge_pending(&mut self) {
        match self.watch.judge(&self.event) {
            Ok(Some(sign)) => {
                if let Some(sign) = sign {
                    self.seen = OthersSign::strongest(self.seen, Some(sign));
                    self.stats.others_seen += 1;
                }
                self.cut_in_a_row = if matches!(sign, Some(OthersSign::CutShort { .. })) {
                    self.cut_in_a_row + 1
                } else {
                    0
                };
                if self.cut_in_a_row >= CUT_SHORT_IN_A_ROW && self.yield_ns != NEVER_YIELD {
                    tracing::warn!(
                        gpu = self.ordinal,
                        bursts = self.cut_in_a_row,
                        "every burst ended early: our kernels no longer end at a clock jump"
                    );
                    self.yield_ns = NEVER_YIELD;
                }
            }
            Ok(None) => {}
            Err(e) => {
                if !std::mem::replace(&mut self.timing_failed, true) {
                    tracing::warn!(gpu = self.ordinal, error = %e,
                        "our kernels' timing is unavailable: others' work shows only in NVML");
                }
            }
        }
    }

    /// Whether the work launched so far has finished.
    fn queued_done(&mut self) -> Result<bool, CudaError> {
        if self.pending {
            let done = self
                .event
                .try_is_complete()
                .map_err(|e| CudaError::driver("cuEventQuery", e))?;
            self.pending = !done;
        }
        Ok(!self.pending)
    }

    /// The error to return before doing anything: the one that broke the context, or
    /// the one a pacing thread stopped on (joined here once it has exited, then
    /// checked as a launch's error would be).
    fn healthy(&mut self) -> Result<(), CudaError> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        if self.pacing.as_ref().is_some_and(Pacing::exited) {
            self.stop_pacing();
        }
        match self.fault.take() {
            Some(e) => self.check(Err(e)),
            None => Ok(()),
        }
    }

    /// Stops the pacing thread, if one runs, and joins it (promptly: it wakes from any
    /// wait at once). Its kernel in flight, if any, is recorded in the event, so the
    /// next burst or [`CudaLoad::quiesce`] sees it. Keeps its count and its error.
    fn stop_pacing(&mut self) {
        let Some(pacing) = self.pacing.take() else {
            return;
        };
        let stopped = pacing.stop();
        self.stats.kernels_launched += stopped.kernels;
        self.stats.one_in_flight += stopped.kernels;
        self.late_unreported += stopped.late;
        self.late_sign = OthersSign::strongest(self.late_sign, stopped.sign);
        self.gaps_unreported += stopped.gaps;
        self.pending = true;
        if let Some(e) = stopped.error {
            self.fault = Some(e);
        }
        tracing::debug!(
            gpu = self.ordinal,
            kernels = stopped.kernels,
            "pacing thread stopped"
        );
    }

    /// Starts the pacing thread for the shape in force unless one runs. It first waits
    /// for whatever is queued (a burst, or the last kernel of a thread of another
    /// shape), so its first kernel is the only one of ours on the GPU.
    fn start_pacing(&mut self) -> Result<(), CudaError> {
        if self.pacing.is_some() {
            return Ok(());
        }
        let Some(cycle) = self.paced() else {
            return Ok(());
        };
        self.watch.restart();
        let launcher = Launcher {
            ctx: Arc::clone(&self.ctx),
            stream: Arc::clone(&self.stream),
            func: self.func.clone(),
            event: Arc::clone(&self.event),
            cycle,
            yield_ns: self.yield_ns,
            watch: OthersWatch::new(&self.stream)?,
        };
        self.pacing = Some(Pacing::spawn(
            self.ordinal,
            launcher,
            self.load,
            self.gap_hold,
        )?);
        tracing::debug!(
            gpu = self.ordinal,
            cycle = cycle.as_str(),
            "pacing thread started"
        );
        Ok(())
    }

    /// Remembers an error that leaves the context unusable; passes any error on.
    fn check(&mut self, outcome: Result<(), CudaError>) -> Result<(), CudaError> {
        if let Err(e) = &outcome
            && e.kind() != ErrorKind::Transient
        {
            tracing::warn!(gpu = self.ordinal, error = %e, "CUDA context unusable");
            self.broken = Some(e.clone());
        }
        outcome
    }
}

impl LoadSource for CudaLoad {
    type Error = CudaError;

    /// The strongest sign, since the last call, that a burst of ours started a context
    /// switch late or was cut short by a preemption (`others.rs`), or that a kernel of
    /// the one-in-flight thread showed the same or was held back past its length. What
    /// the kernels met while filling gaps is not reported here but by
    /// [`LoadSource::gaps_seen`] (the policy does not pause for it).
    fn others_seen(&mut self) -> Option<OthersSign> {
        self.judge_pending();
        let (running, running_sign) = self.pacing.as_ref().map_or((0, None), Pacing::take_late);
        let late = running + std::mem::take(&mut self.late_unreported);
        self.stats.late_kernels += late;
        let paced = OthersSign::strongest(running_sign, self.late_sign.take());
        OthersSign::strongest(self.seen.take(), paced)
    }

    /// Runs two tiny kernels and compares their starts (`others.rs`): whether
    /// another context has run on the GPU since our previous kernel. Called while idle;
    /// a pacing thread is stopped first, and our queued work (at most a burst) waited
    /// for, up to 100 ms (longer: `Some(true)`, as someone is there).
    ///
    /// # Errors
    /// The error that made the context unusable, or a failed launch or query.
    fn probe(&mut self, _now: Time) -> Result<Option<bool>, CudaError> {
        self.healthy()?;
        self.stop_pacing();
        self.judge_pending();
        if !self.quiesce(PROBE_DRAIN) {
            return Ok(Some(true));
        }
        let found = match others::probe(&self.stream, &self.func, &mut self.watch, &self.event) {
            Ok(found) => found,
            Err(e) => return self.check(Err(e)).map(|()| None),
        };
        self.pending = true;
        self.stats.probes += 1;
        self.stats.probes_found += u64::from(found);
        tracing::debug!(gpu = self.ordinal, found, "probe");
        Ok(Some(found))
    }

    /// Records `load`; kernels start at the next [`LoadSource::launch_due`]. A duty
    /// from idle starts a period at once there; a change while active applies from the
    /// next period. Idle stops launching; what is queued (at most one period) finishes.
    /// `now` is not used: periods are timed on the launcher's own clock.
    ///
    /// In [`LaunchShape::OneInFlight`] and [`LaunchShape::Gaps`] a running pacing
    /// thread takes a new duty or width from its next gap and kernel; idle stops and
    /// joins it at once (its one kernel in flight finishes).
    ///
    /// # Errors
    /// The error that made the context unusable, or the one a pacing thread stopped on.
    fn set_load(&mut self, _now: Time, load: Load) -> Result<(), CudaError> {
        self.healthy()?;
        if load.is_idle() {
            self.pacer.stop();
            self.stop_pacing();
            // A resumption is never judged against the starts from before the idle
            // spell (the GPU starts our first kernels late after idling).
            self.watch.restart_next();
        } else if let Some(pacing) = &self.pacing {
            pacing.set_load(load);
        }
        self.load = load;
        Ok(())
    }

    /// In [`LaunchShape::Bursts`], launches the burst of a period that has begun (see
    /// [`Pacer`]); does nothing while idle or between period starts. In
    /// [`LaunchShape::OneInFlight`] (with a `beside_kernel`) and [`LaunchShape::Gaps`],
    /// launches nothing itself: starts the pacing thread if none runs and the load is
    /// not idle, and reports the error it stopped on.
    ///
    /// # Errors
    /// The failed driver call (from this thread or the pacing thread): transient ones
    /// (a resource shortage) are retried at the next period (the next call, for the
    /// pacing thread); any other leaves the context unusable, and every later call
    /// returns it (the caller opens a new context).
    fn launch_due(&mut self, _now: Time) -> Result<(), CudaError> {
        self.healthy()?;
        if self.load.is_idle() {
            return Ok(());
        }
        if self.paced().is_some() {
            let started = self.start_pacing();
            return self.check(started);
        }
        let done = match self.queued_done() {
            Ok(done) => done,
            Err(e) => return self.check(Err(e)),
        };
        let now = self.clock.now();
        let duty = self.load.duty.fraction();
        match self.pacer.pace(now, duty, self.settings.max_kernel, done) {
            Pace::Wait => Ok(()),
            Pace::Skip => {
                self.skipped += 1;
                Ok(())
            }
            Pace::Launch(burst) => {
                let outcome = self.launch(burst, self.load.width.get());
                self.check(outcome)
            }
        }
    }

    /// Stops the pacing thread, if one runs (the loop releases only while idle, when
    /// none does). The context is released by dropping this value.
    ///
    /// # Errors
    /// The error that made the context unusable, or the one a pacing thread stopped on.
    fn release(&mut self, _now: Time) -> Result<(), CudaError> {
        self.stop_pacing();
        self.healthy()
    }

    /// Switches the shape from the next launch on.
    ///
    /// - From bursts to [`LaunchShape::OneInFlight`] (with a `beside_kernel`; without
    ///   one it stays bursts) or [`LaunchShape::Gaps`]: no more bursts start; the next
    ///   `launch_due` with a load starts the pacing thread, which waits for a burst
    ///   still queued before its first kernel.
    /// - Between one in flight and gaps: the thread is stopped and joined (its kernel in
    ///   flight stays in the event), and the next `launch_due` with a load starts one of
    ///   the new shape, which waits for that kernel before its first.
    /// - To [`LaunchShape::Bursts`]: the pacing thread is stopped and joined; bursts
    ///   resume at the next `launch_due` with a fresh period, the first queued behind
    ///   the thread's last kernel if that is still running.
    ///
    /// So two of our kernels are never queued at once outside bursts.
    fn set_shape(&mut self, shape: LaunchShape) {
        if shape == self.shape {
            return;
        }
        tracing::debug!(gpu = self.ordinal, shape = shape.as_str(), "launch shape");
        let was = self.paced();
        self.shape = shape;
        let next = self.paced();
        if was == next {
            // Bursts beside holders too (no `beside_kernel`): nothing changes hands.
            return;
        }
        match (was, next) {
            (None, _) => self.pacer.stop(),
            (Some(_), Some(_)) => self.stop_pacing(),
            (Some(was), None) => {
                self.stop_pacing();
                self.watch.restart();
                let busy_until = self.clock.now() + was.kernel();
                self.pacer.resume_after(busy_until);
            }
        }
    }

    /// Takes what the gap-filling kernels met since the last call: the running
    /// thread's, and what a stopped one left.
    fn gaps_seen(&mut self) -> GapReport {
        let running = self
            .pacing
            .as_ref()
            .map_or_else(GapReport::default, Pacing::take_gaps);
        std::mem::take(&mut self.gaps_unreported) + running
    }

    /// Sets the hold after a meeting while filling gaps: for the running thread (a hold
    /// under way is re-timed from its meeting) and every one started later.
    fn set_gap_hold(&mut self, hold: Duration) {
        self.gap_hold = hold;
        if let Some(pacing) = &self.pacing {
            pacing.set_hold(hold);
        }
    }
}

impl Drop for CudaLoad {
    fn drop(&mut self) {
        self.stop_pacing();
        if self.broken.is_none() && !self.quiesce(DRAIN_ON_DROP) {
            tracing::warn!(
                gpu = self.ordinal,
                "kernels still queued when releasing the context"
            );
        }
        // The fields drop after this: the event, module and stream are destroyed, the
        // primary context is released, and the driver frees its memory when no one
        // else in the process holds it.
    }
}

/// Sets the primary context's flags before it is retained: blocking sync, so a thread
/// that waits for the GPU sleeps instead of spinning a core. This works on any driver
/// (`cuCtxSetFlags` after creation needs 12.1). Other flags set in this process are
/// kept, except `CU_CTX_LMEM_RESIZE_TO_MAX`, which would pin grown stacks.
fn set_primary_flags(device: sys::CUdevice) -> Result<(), CudaError> {
    let mut flags: std::ffi::c_uint = 0;
    let mut active: std::ffi::c_int = 0;
    // SAFETY: `device` came from cuDeviceGet; both out-pointers are valid locals.
    unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) }
        .result()
        .map_err(|e| CudaError::driver("cuDevicePrimaryCtxGetState", e))?;
    let wanted = primary_flags(flags);
    if wanted == flags {
        return Ok(());
    }
    // SAFETY: as above; the flags are a valid combination of CUctx_flags.
    match unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(device, wanted) }.result() {
        Ok(()) => Ok(()),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE => {
            // Someone in this process holds it already; our events block anyway.
            tracing::warn!(
                active,
                flags,
                "primary context active: scheduling flags left as they are"
            );
            Ok(())
        }
        Err(e) => Err(CudaError::driver("cuDevicePrimaryCtxSetFlags", e)),
    }
}

/// The primary context flags we want, given the current ones.
fn primary_flags(current: u32) -> u32 {
    use sys::CUctx_flags_enum::*;
    let keep = current & !(CU_CTX_SCHED_MASK as u32) & !(CU_CTX_LMEM_RESIZE_TO_MAX as u32);
    keep | CU_CTX_SCHED_BLOCKING_SYNC as u32
}

/// Sets the stack limit to 0 (the spin kernel has no stack frame) and returns what the
/// driver kept. The stack reservation is stack size x resident threads x SMs: a large
/// share of a default context's memory
/// (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes). A failure only
/// costs memory, so it is logged, not fatal.
fn zero_stack(ctx: &Arc<CudaContext>) -> usize {
    let limit = sys::CUlimit::CU_LIMIT_STACK_SIZE;
    if let Err(e) = ctx.set_limit(limit, 0) {
        tracing::warn!(error = %CudaError::driver("cuCtxSetLimit", e), "stack limit not lowered");
    }
    ctx.get_limit(limit).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_settings_are_one_kernel_a_fifty_ms_burst_on_our_own_stream_and_bursts_beside() {
        let s = LauncherSettings::default();
        assert_eq!(s.period, Duration::from_millis(50));
        assert_eq!(s.max_kernel, s.period);
        assert_eq!(s.beside_kernel, None);
        assert!(s.own_stream);
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn settings_out_of_range_are_refused_with_the_value() {
        let s = LauncherSettings {
            period: Duration::ZERO,
            ..LauncherSettings::default()
        };
        let err = s.validate().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.to_string()
                .contains("period must be between 1 ms and 1 s"),
            "{err}"
        );
        for bad in [Duration::from_micros(9), Duration::from_millis(1001)] {
            let s = LauncherSettings {
                max_kernel: bad,
                ..LauncherSettings::default()
            };
            assert!(s.validate().unwrap_err().to_string().contains("max kernel"));
        }
        // Longer than the period is fine: a burst never runs longer than its on-time.
        let s = LauncherSettings {
            max_kernel: Duration::from_millis(200),
            ..LauncherSettings::default()
        };
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn a_one_in_flight_kernel_must_fit_the_period() {
        for bad in [Duration::from_micros(9), Duration::from_millis(51)] {
            let s = LauncherSettings {
                beside_kernel: Some(bad),
                ..LauncherSettings::default()
            };
            let err = s.validate().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported);
            assert!(
                err.to_string().contains(
                    "beside kernel (one-in-flight kernel length) must be between 10 us and the \
                     period (50ms), got"
                ),
                "{err}"
            );
        }
        let s = LauncherSettings {
            beside_kernel: Some(Duration::from_micros(10)),
            ..LauncherSettings::default()
        };
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn primary_context_gets_blocking_sync_and_never_lmem_resize_to_max() {
        use sys::CUctx_flags_enum::*;
        let blocking = CU_CTX_SCHED_BLOCKING_SYNC as u32;
        assert_eq!(primary_flags(0), blocking);
        assert_eq!(primary_flags(CU_CTX_SCHED_SPIN as u32), blocking);
        assert_eq!(
            primary_flags(CU_CTX_LMEM_RESIZE_TO_MAX as u32 | 1),
            blocking
        );
        let map_host = CU_CTX_MAP_HOST as u32;
        assert_eq!(primary_flags(map_host), map_host | blocking);
    }

    #[test]
    fn a_cuda_load_and_its_pacing_thread_can_move_to_the_loops_thread() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<CudaLoad>();
        send_and_sync::<Launcher>();
    }

    #[test]
    fn opening_without_a_driver_is_an_error_not_a_panic() {
        let name = "launcher::tests::opening_without_a_driver_is_an_error_not_a_panic";
        crate::no_driver::without_a_driver(name, || {
            let err = CudaLoad::open(0, LauncherSettings::default())
                .err()
                .unwrap();
            assert_eq!(err, CudaError::NoDriver);
            assert_eq!(err.kind(), ErrorKind::Unsupported);
        });
    }
}
