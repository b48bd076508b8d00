//! [`CudaLoad`]: turns a [`Load`] into bursts of spin kernels, one burst per period,
//! launched from the caller's thread at [`LoadSource::launch_due`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg, result, sys,
};
use cudarc::nvrtc::Ptx;
use gpufill_core::{Clock, DeviceError, ErrorKind, Load, LoadSource, SystemClock, Time};

use crate::device::handle;
use crate::error::CudaError;
use crate::plan::{Burst, Pace, Pacer, backoff};
use crate::ptx::{SPIN_PTX, SpinKernel};

/// Threads per block: one warp, the least a kernel can occupy.
const BLOCK_THREADS: u32 = 32;
/// First wait before polling queued work again while draining (see [`backoff`]).
const FIRST_POLL: Duration = Duration::from_micros(50);
/// Longest wait between polls while draining.
const MAX_POLL: Duration = Duration::from_millis(1);
/// How long dropping a [`CudaLoad`] waits for its queued kernels (at most one period
/// is ever queued) before it releases the context anyway.
const DRAIN_ON_DROP: Duration = Duration::from_secs(2);

/// How the launcher shapes the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LauncherSettings {
    /// One burst per period. 50 ms divides NVML's utilization sample (H200: one each
    /// 200 ms, which reads as an average over 100 ms) into whole bursts, so every sample
    /// sees the same on-time: NVML then reads the duty exactly, where a 40 ms period
    /// read several points off depending on the phase (docs/benchmarks.md, section
    /// "Launching from the loop's thread").
    /// The caller's ticks should divide it (see [`Pacer`]). At most one period of our
    /// kernels is queued, so it also bounds how long a newcomer can find our work on the
    /// GPU after the check that missed it.
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
            period: Duration::from_millis(50),
            max_kernel: Duration::from_millis(2),
            own_stream: true,
            kernel: SpinKernel::default(),
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
}

/// Counters for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Kernels submitted.
    pub kernels_launched: u64,
    /// Periods in which kernels were submitted.
    pub bursts: u64,
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

/// The load source for one GPU: spin kernels launched from the caller's thread.
///
/// [`LoadSource::set_load`] records the load; [`LoadSource::launch_due`], called by the
/// fill loop at every tick right after it read the process list, launches the burst of
/// a period that has begun. Nothing runs between calls: there is no thread of ours, so
/// no kernel can start on a decision older than the tick. Dropping it waits for our
/// queued kernels and releases the context.
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
    // Dropped in this order, after the drain in `Drop::drop`: the event, the function
    // (and its module), the stream, then our hold on the context.
    event: CudaEvent,
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
        // Timing off, and no blocking sync: we only ever query it, never wait on it,
        // so completing it needs no interrupt and wakes no driver thread.
        let event = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        tracing::info!(gpu = ordinal, stack_limit, ?settings, "opened");
        Ok(CudaLoad {
            ordinal,
            settings,
            stack_limit,
            clock: SystemClock::new(),
            load: Load::IDLE,
            pacer: Pacer::new(settings.period),
            pending: false,
            skipped: 0,
            stats: LaunchStats::default(),
            broken: None,
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
        LaunchStats {
            skipped_periods: self.skipped + self.pacer.missed(),
            ..self.stats
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
    /// work. Kernels start only in [`LoadSource::launch_due`] and about one burst of
    /// them is queued at most (see [`Pacer`]), so this takes at most about its on-time,
    /// `duty x period` (measured: docs/benchmarks.md, section "Hardware tests (run B)").
    pub fn quiesce(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
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

    /// Launches `burst` as back-to-back kernels of `width` one-warp blocks and records
    /// the event after them.
    fn launch(&mut self, burst: Burst, width: u32) -> Result<(), CudaError> {
        let cfg = LaunchConfig {
            grid_dim: (width, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let ns = u64::try_from(burst.kernel.as_nanos()).unwrap_or(u64::MAX);
        let mut outcome = Ok(());
        let mut launched = 0u32;
        for _ in 0..burst.count {
            // SAFETY: `spin` and `spin_sleep` take exactly one `.u64` parameter (checked
            // by the ptx tests) and `ns` is a u64 that lives until `launch` returns, which
            // copies it. The kernel touches no memory, so no argument can be misused.
            let result = unsafe { self.stream.launch_builder(&self.func).arg(&ns).launch(cfg) };
            if let Err(e) = result {
                outcome = Err(CudaError::driver("cuLaunchKernel", e));
                break;
            }
            launched += 1;
        }
        if launched > 0 {
            self.pending = true;
            self.stats.kernels_launched += u64::from(launched);
            self.stats.bursts += 1;
            let recorded = self
                .event
                .record(&self.stream)
                .map_err(|e| CudaError::driver("cuEventRecord", e));
            outcome = outcome.and(recorded);
        }
        tracing::trace!(
            kernels = launched,
            kernel_us = burst.kernel.as_micros() as u64,
            "burst"
        );
        outcome
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

    /// Records `load`; kernels start at the next [`LoadSource::launch_due`]. A duty
    /// from idle starts a period at once there; a change while active applies from the
    /// next period. Idle stops launching; what is queued (at most one period) finishes.
    /// `now` is not used: periods are timed on the launcher's own clock.
    ///
    /// # Errors
    /// The error that made the context unusable, if one did.
    fn set_load(&mut self, _now: Time, load: Load) -> Result<(), CudaError> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        if load.is_idle() {
            self.pacer.stop();
        }
        self.load = load;
        Ok(())
    }

    /// Launches the burst of a period that has begun (see [`Pacer`]); does nothing
    /// while idle or between period starts.
    ///
    /// # Errors
    /// The failed driver call: transient ones (a resource shortage) are retried at the
    /// next period; any other leaves the context unusable, and every later call
    /// returns it (the caller opens a new context).
    fn launch_due(&mut self, _now: Time) -> Result<(), CudaError> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        if self.load.is_idle() {
            return Ok(());
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
}

impl Drop for CudaLoad {
    fn drop(&mut self) {
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
/// driver kept. The stack reservation is stack size x resident threads x SMs: about half
/// of a default context's memory on an H200 (docs/benchmarks.md, section "The GPU itself,
/// measured before gpufill"). A failure only costs memory, so it is logged, not fatal.
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
    fn default_settings_are_a_fifty_ms_period_of_two_ms_kernels_on_our_own_stream() {
        let s = LauncherSettings::default();
        assert_eq!(s.period, Duration::from_millis(50));
        assert_eq!(s.max_kernel, Duration::from_millis(2));
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
        let s = LauncherSettings {
            max_kernel: Duration::from_millis(51),
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
        if crate::device::driver_present() {
            return; // covered by the hardware tests
        }
        let err = CudaLoad::open(0, LauncherSettings::default())
            .err()
            .unwrap();
        assert_eq!(err, CudaError::NoDriver);
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }
}
