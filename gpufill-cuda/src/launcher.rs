//! [`CudaLoad`]: a launcher thread per GPU that turns a [`Load`] into bursts of spin
//! kernels, one burst per period.

use std::mem::MaybeUninit;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg, result, sys,
};
use cudarc::nvrtc::Ptx;
use gpufill_core::{Clock, DeviceError, Duty, ErrorKind, Load, LoadSource, SystemClock, Time};

use crate::CudaError;
use crate::device::handle;
use crate::plan::{Burst, backoff, next_period, plan_burst};
use crate::ptx::{SPIN_PTX, SpinKernel};

/// Threads per block: one warp, the least a kernel can occupy.
const BLOCK_THREADS: u32 = 32;
/// First wait before polling a late burst again (see [`backoff`]).
const FIRST_POLL: Duration = Duration::from_micros(50);
/// Longest wait between polls of a late burst.
const MAX_POLL: Duration = Duration::from_millis(1);

/// How the launcher shapes the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LauncherSettings {
    /// One burst per period. 20 ms divides NVML's 200 ms window (H200) into exactly 10
    /// bursts, so every window sees the same on-time and the reading does not jitter.
    pub period: Duration,
    /// The longest single kernel. A stop waits for what is queued, so this and the
    /// period bound how long another process can find the GPU busy with our work.
    pub max_kernel: Duration,
    /// Launch on a lowest-priority non-blocking stream of our own (`true`), or on the
    /// context's default stream (`false`, to measure what the extra stream costs).
    pub own_stream: bool,
    /// The kernel launched: `spin` or `spin_sleep` (same residency, fewer issue slots).
    pub kernel: SpinKernel,
}

impl Default for LauncherSettings {
    fn default() -> Self {
        LauncherSettings {
            period: Duration::from_millis(20),
            max_kernel: Duration::from_millis(2),
            own_stream: true,
            kernel: SpinKernel::Spin,
        }
    }
}

impl LauncherSettings {
    /// Checks the ranges: a period from 1 ms to 1 s, a kernel from 10 us to the period.
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
        if !(Duration::from_micros(10)..=self.period).contains(&self.max_kernel) {
            return Err(CudaError::Settings(format!(
                "max kernel must be between 10 us and the period ({:?}), got {:?}",
                self.period, self.max_kernel
            )));
        }
        Ok(())
    }

    /// How late a previous burst may finish before this period is skipped: a tenth of
    /// the period. A burst at full duty ends microseconds after the next period starts
    /// and is waited for; one slowed by another process's time slices is not.
    fn late_slack(&self) -> Duration {
        self.period / 10
    }
}

/// Counters for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Kernels submitted.
    pub kernels_launched: u64,
    /// Periods in which kernels were submitted.
    pub bursts: u64,
    /// Periods with a duty that launched nothing because the previous burst was still
    /// running (or the thread woke too late for them).
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

/// The load source for one GPU: a spin kernel launched by a thread of its own.
///
/// [`LoadSource::set_load`] only hands the new load to the thread and returns at once.
/// Dropping it stops the thread, waits for our queued kernels and releases the context.
pub struct CudaLoad {
    ordinal: usize,
    settings: LauncherSettings,
    stack_limit: usize,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    // Declared last: dropped after the thread has been joined in `Drop::drop`.
    ctx: Arc<CudaContext>,
}

/// What the caller and the launcher thread share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the launcher: a new load, or stop.
    wake: Condvar,
    /// Wakes callers of `quiesce`: drained, or exited.
    drained: Condvar,
}

struct State {
    load: Load,
    stop: bool,
    /// No kernel of ours is queued or running.
    drained: bool,
    /// The thread has left its loop.
    exited: bool,
    last_error: Option<CudaError>,
    /// The error that ended the thread, returned by every later `set_load`.
    fatal: Option<CudaError>,
    stats: LaunchStats,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CudaLoad {
    /// Opens GPU `ordinal`: retains its primary context with blocking sync, sets the
    /// stack limit to 0, loads the spin kernel and starts the launcher thread
    /// (`gpufill-launch-{ordinal}`), idle until the first [`LoadSource::set_load`].
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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                load: Load::IDLE,
                stop: false,
                drained: true,
                exited: false,
                last_error: None,
                fatal: None,
                stats: LaunchStats::default(),
            }),
            wake: Condvar::new(),
            drained: Condvar::new(),
        });
        let thread = spawn(ordinal, settings, ctx.clone(), shared.clone())?;
        tracing::info!(gpu = ordinal, stack_limit, ?settings, "opened");
        Ok(CudaLoad {
            ordinal,
            settings,
            stack_limit,
            shared,
            thread: Some(thread),
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
        self.shared.lock().stats
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

    /// Stops launching (the load becomes idle) and waits until no kernel of ours is
    /// queued or running, for at most `timeout`. Returns whether the GPU is free of our
    /// work. At most one period of kernels is ever queued, so this takes at most the
    /// on-time of one burst (18 ms at duty 0.9 with the defaults).
    pub fn quiesce(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        state.load.duty = Duty::ZERO;
        self.shared.wake.notify_all();
        while !(state.drained || state.exited) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .drained
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl LoadSource for CudaLoad {
    type Error = CudaError;

    /// Hands `load` to the launcher thread and returns at once. A new duty from idle
    /// starts a period at once; a change while active applies from the next period.
    /// `now` is not used: the launcher keeps its own clock.
    ///
    /// # Errors
    /// The launcher thread's last error since the previous call (then cleared), or,
    /// once the thread has stopped on a lost or unsupported device, that error.
    fn set_load(&mut self, _now: Time, load: Load) -> Result<(), CudaError> {
        let mut state = self.shared.lock();
        if let Some(fatal) = &state.fatal {
            let fatal = fatal.clone();
            return Err(state.last_error.take().unwrap_or(fatal));
        }
        if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
            return Err(CudaError::Launcher {
                ordinal: self.ordinal,
                reason: "the thread has exited".into(),
            });
        }
        if state.load != load {
            state.load = load;
            self.shared.wake.notify_all();
        }
        state.last_error.take().map_or(Ok(()), Err)
    }
}

impl Drop for CudaLoad {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(gpu = self.ordinal, "launcher thread panicked");
        }
        // `ctx` drops after this: the primary context is released, and the driver frees
        // its memory when no one else in the process holds it.
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
/// driver kept. The stack reservation is stack size x resident threads x SMs: 264 MiB of
/// the H200's 518 MiB context. A failure only costs memory, so it is logged, not fatal.
fn zero_stack(ctx: &Arc<CudaContext>) -> usize {
    let limit = sys::CUlimit::CU_LIMIT_STACK_SIZE;
    if let Err(e) = ctx.set_limit(limit, 0) {
        tracing::warn!(error = %CudaError::driver("cuCtxSetLimit", e), "stack limit not lowered");
    }
    ctx.get_limit(limit).unwrap_or(usize::MAX)
}

/// Starts the launcher thread and waits until it has loaded the kernel.
fn spawn(
    ordinal: usize,
    settings: LauncherSettings,
    ctx: Arc<CudaContext>,
    shared: Arc<Shared>,
) -> Result<JoinHandle<()>, CudaError> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(format!("gpufill-launch-{ordinal}"))
        .spawn(move || {
            let _span = tracing::info_span!("launcher", gpu = ordinal).entered();
            match Gpu::new(ctx, settings.own_stream, settings.kernel) {
                Ok(gpu) => {
                    let _ = ready_tx.send(Ok(()));
                    Launcher::new(settings, shared, gpu).run();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| CudaError::Launcher {
            ordinal,
            reason: format!("cannot start: {e}"),
        })?;
    let ready = ready_rx.recv().unwrap_or_else(|_| {
        Err(CudaError::Launcher {
            ordinal,
            reason: "died while loading the kernel".into(),
        })
    });
    if let Err(e) = ready {
        let _ = thread.join();
        return Err(e);
    }
    Ok(thread)
}

/// The CUDA objects the launcher thread owns. Fields drop in order: the event, the
/// function (and its module), the stream, then this thread's hold on the context.
struct Gpu {
    event: Event,
    func: CudaFunction,
    stream: Arc<CudaStream>,
    #[allow(dead_code)] // held so the context outlives the objects above
    ctx: Arc<CudaContext>,
}

impl Gpu {
    /// Loads the module and creates the stream and the event, on the launcher thread.
    fn new(ctx: Arc<CudaContext>, own_stream: bool, kernel: SpinKernel) -> Result<Gpu, CudaError> {
        ctx.bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let module = ctx
            .load_module(Ptx::from_src(SPIN_PTX))
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        let func = module
            .load_function(kernel.entry())
            .map_err(|e| CudaError::driver("cuModuleGetFunction", e))?;
        if let Ok(local @ 1..) = func.local_size_bytes() {
            tracing::warn!(
                local,
                "spin kernel uses local memory: the stack limit will grow"
            );
        }
        let stream = if own_stream {
            // Lower numbers are higher priorities; `least` is the lowest (0, the
            // default). Priorities order work inside our context only.
            let (least, _greatest) = result::stream::get_priority_range()
                .map_err(|e| CudaError::driver("cuCtxGetStreamPriorityRange", e))?;
            ctx.new_stream_with_priority(least)
                .map_err(|e| CudaError::driver("cuStreamCreateWithPriority", e))?
        } else {
            ctx.default_stream()
        };
        let event = Event::new()?;
        Ok(Gpu {
            event,
            func,
            stream,
            ctx,
        })
    }

    /// Submits `burst` as back-to-back kernels of `width` one-warp blocks and records
    /// the event after them. Returns how many kernels were submitted, and the error that
    /// stopped the burst early, if any.
    fn launch(&self, burst: Burst, width: u32) -> (u32, Result<(), CudaError>) {
        let cfg = LaunchConfig {
            grid_dim: (width, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let ns = u64::try_from(burst.kernel.as_nanos()).unwrap_or(u64::MAX);
        let mut launched = 0;
        for _ in 0..burst.count {
            // SAFETY: `spin` and `spin_sleep` take exactly one `.u64` parameter (checked
            // by the ptx tests) and `ns` is a u64 that lives until `launch` returns, which copies
            // it. The kernel touches no memory, so no argument can be misused.
            let result = unsafe { self.stream.launch_builder(&self.func).arg(&ns).launch(cfg) };
            if let Err(e) = result {
                return (launched, Err(CudaError::driver("cuLaunchKernel", e)));
            }
            launched += 1;
        }
        (launched, self.event.record(&self.stream))
    }
}

/// A CUDA event with `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`: waiting on it
/// sleeps the thread, and recording it costs no timestamp. cudarc's `CudaEvent` takes
/// one flag only, hence this wrapper.
struct Event {
    raw: sys::CUevent,
}

impl Event {
    /// Creates the event in the context current on this thread.
    fn new() -> Result<Event, CudaError> {
        use sys::CUevent_flags_enum::*;
        let flags = CU_EVENT_BLOCKING_SYNC as u32 | CU_EVENT_DISABLE_TIMING as u32;
        let mut raw = MaybeUninit::uninit();
        // SAFETY: `raw` is a valid out-pointer; a context is current (Gpu::new bound it).
        unsafe { sys::cuEventCreate(raw.as_mut_ptr(), flags) }
            .result()
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        // SAFETY: cuEventCreate succeeded, so it wrote the handle.
        let raw = unsafe { raw.assume_init() };
        Ok(Event { raw })
    }

    /// Records the work submitted so far on `stream`.
    fn record(&self, stream: &CudaStream) -> Result<(), CudaError> {
        // SAFETY: both handles are alive (we own the event; `Gpu` keeps the stream) and
        // belong to the same context.
        unsafe { sys::cuEventRecord(self.raw, stream.cu_stream()) }
            .result()
            .map_err(|e| CudaError::driver("cuEventRecord", e))
    }

    /// Whether the recorded work has finished, without waiting.
    fn is_complete(&self) -> Result<bool, CudaError> {
        // SAFETY: the event is alive until `drop`.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(CudaError::driver(
                "cuEventQuery",
                cudarc::driver::DriverError(code),
            )),
        }
    }

    /// Sleeps until the recorded work has finished.
    fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: the event is alive until `drop`.
        unsafe { sys::cuEventSynchronize(self.raw) }
            .result()
            .map_err(|e| CudaError::driver("cuEventSynchronize", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own the handle and never use it again. Destroying an event whose
        // work is pending is allowed; the driver frees it when the work completes.
        let _ = unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}

/// Why the launcher woke up.
enum Wake {
    Stop,
    Idle,
    /// A period is due with this load.
    Due(Load),
}

/// How waiting for the previous burst ended.
enum Previous {
    Done,
    /// Still running past the slack: skip this period.
    Late,
    /// Idle or stop was requested meanwhile.
    Interrupted,
}

struct Launcher {
    settings: LauncherSettings,
    shared: Arc<Shared>,
    gpu: Gpu,
    clock: SystemClock,
    /// The event covers kernels that may not have finished.
    pending: bool,
}

impl Launcher {
    fn new(settings: LauncherSettings, shared: Arc<Shared>, gpu: Gpu) -> Self {
        Launcher {
            settings,
            shared,
            gpu,
            clock: SystemClock::new(),
            pending: false,
        }
    }

    fn run(mut self) {
        let mut next: Option<Time> = None;
        loop {
            let wake = match next {
                None => self.wait_for_work(),
                Some(at) => self.wait_until(at),
            };
            let outcome = match wake {
                Wake::Stop => break,
                Wake::Idle => {
                    next = None;
                    self.drain()
                }
                Wake::Due(load) => {
                    let start = next.unwrap_or_else(|| self.clock.now());
                    let outcome = self.period(start, load);
                    next = Some(self.advance(start));
                    outcome
                }
            };
            if let Err(e) = outcome
                && self.fail(e)
            {
                break;
            }
        }
        self.shutdown();
    }

    /// Idle: sleeps until a duty or stop arrives. A duty starts a period at once.
    fn wait_for_work(&self) -> Wake {
        let mut state = self.shared.lock();
        loop {
            if state.stop {
                return Wake::Stop;
            }
            if !state.load.is_idle() {
                state.drained = false;
                return Wake::Due(state.load);
            }
            state = self
                .shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Active: sleeps until the period starting `at`, waking early for idle or stop.
    fn wait_until(&self, at: Time) -> Wake {
        let mut state = self.shared.lock();
        loop {
            if state.stop {
                return Wake::Stop;
            }
            if state.load.is_idle() {
                return Wake::Idle;
            }
            let left = at - self.clock.now();
            if left.is_zero() {
                state.drained = false;
                return Wake::Due(state.load);
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// One period starting at `start`: launch its burst unless the previous one is
    /// still running (never let work queue up).
    fn period(&mut self, start: Time, load: Load) -> Result<(), CudaError> {
        if self.pending {
            match self.wait_previous(start + self.settings.late_slack())? {
                Previous::Done => {}
                Previous::Late => {
                    self.shared.lock().stats.skipped_periods += 1;
                    return Ok(());
                }
                Previous::Interrupted => return Ok(()),
            }
        }
        let room = (start + self.settings.period) - self.clock.now();
        let duty = load.duty.fraction();
        let Some(burst) = plan_burst(duty, self.settings.period, self.settings.max_kernel, room)
        else {
            return Ok(());
        };
        let (launched, outcome) = self.gpu.launch(burst, load.width.get());
        if launched > 0 {
            self.pending = true;
            let mut state = self.shared.lock();
            state.stats.kernels_launched += u64::from(launched);
            state.stats.bursts += 1;
        }
        tracing::trace!(
            kernels = launched,
            kernel_us = burst.kernel.as_micros() as u64,
            "burst"
        );
        outcome
    }

    /// Polls the previous burst's event until it completes or `limit` passes.
    fn wait_previous(&mut self, limit: Time) -> Result<Previous, CudaError> {
        let mut attempt = 0;
        loop {
            if self.gpu.event.is_complete()? {
                self.pending = false;
                return Ok(Previous::Done);
            }
            let left = limit - self.clock.now();
            if left.is_zero() {
                return Ok(Previous::Late);
            }
            if !self.nap(backoff(FIRST_POLL, MAX_POLL, attempt).min(left)) {
                return Ok(Previous::Interrupted);
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// Sleeps `d` unless idle or stop is requested; returns whether to go on.
    fn nap(&self, d: Duration) -> bool {
        let wanted = |s: &State| !s.stop && !s.load.is_idle();
        let state = self.shared.lock();
        if !wanted(&state) {
            return false;
        }
        let (state, _) = self
            .shared
            .wake
            .wait_timeout(state, d)
            .unwrap_or_else(PoisonError::into_inner);
        wanted(&state)
    }

    /// The start of the period after `start`, counting whole periods slept through.
    fn advance(&self, start: Time) -> Time {
        let (next, missed) = next_period(start, self.settings.period, self.clock.now());
        if missed > 0 {
            self.shared.lock().stats.skipped_periods += missed;
        }
        next
    }

    /// Waits for our queued kernels, then tells `quiesce` callers.
    fn drain(&mut self) -> Result<(), CudaError> {
        if self.pending {
            self.gpu.event.synchronize()?;
            self.pending = false;
        }
        self.shared.lock().drained = true;
        self.shared.drained.notify_all();
        Ok(())
    }

    /// Records an error for the next `set_load`; returns whether the thread must stop
    /// (the device is lost or cannot do this).
    fn fail(&self, e: CudaError) -> bool {
        let fatal = e.kind() != ErrorKind::Transient;
        tracing::warn!(error = %e, fatal, "launcher error");
        let mut state = self.shared.lock();
        if fatal {
            state.fatal = Some(e.clone());
        }
        state.last_error = Some(e);
        fatal
    }

    /// Leaves nothing running: waits for our kernels, then reports the thread gone.
    fn shutdown(mut self) {
        if self.pending {
            let _ = self.gpu.event.synchronize();
            self.pending = false;
        }
        let mut state = self.shared.lock();
        state.exited = true;
        state.drained = true;
        drop(state);
        self.shared.drained.notify_all();
        tracing::debug!("launcher stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_settings_are_a_twenty_ms_period_of_two_ms_kernels_on_our_own_stream() {
        let s = LauncherSettings::default();
        assert_eq!(s.period, Duration::from_millis(20));
        assert_eq!(s.max_kernel, Duration::from_millis(2));
        assert!(s.own_stream);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.late_slack(), Duration::from_millis(2));
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
        let s = LauncherSettings {
            max_kernel: Duration::from_millis(30),
            ..LauncherSettings::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("max kernel"));
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
    fn opening_without_a_driver_is_an_error_not_a_panic() {
        if crate::driver_present() {
            return; // covered by the hardware tests
        }
        let err = CudaLoad::open(0, LauncherSettings::default())
            .err()
            .unwrap();
        assert_eq!(err, CudaError::NoDriver);
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }
}
