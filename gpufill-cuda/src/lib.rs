//! gpufill's load source: a spin kernel launched through the CUDA driver API.
//!
//! [`CudaLoad`] implements [`gpufill_core::LoadSource`] for one GPU. The control loop
//! says what share of time our kernels should be resident (the duty) and how wide they
//! are; this crate makes it so, using as little of the GPU, its memory and the CPU as it
//! can, and getting out of the way fast. It holds no control logic. This is the only
//! crate of gpufill with `unsafe`; every block says why it is sound.
//!
//! # The kernel
//!
//! `kernels/spin.cu`, shipped as PTX for `sm_70` at ISA 7.0 ([`ptx::SPIN_PTX`]) and
//! JIT-compiled by the driver: every thread busy-waits on `%globaltimer` for a number of
//! nanoseconds passed as its only argument. A wall-clock wait keeps its length whatever
//! the SM clock does. It touches no memory and has no stack frame, so we allocate
//! nothing on the device: the duration is the kernel argument.
//!
//! # The context, and its memory
//!
//! - The device's **primary context**, the one every CUDA runtime program in the process
//!   would share, never an extra one: one context per process and GPU is the floor of what
//!   `nvidia-smi` shows for us.
//! - **Blocking sync**, set with `cuDevicePrimaryCtxSetFlags` before retaining it (works on
//!   any driver, unlike `cuCtxSetFlags`, which needs 12.1), and events created with
//!   `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`: waiting for the GPU sleeps the
//!   thread instead of spinning a core.
//! - **Stack limit 0**, right after creation. The driver reserves stack size x resident
//!   threads x SMs of device memory; on an H200 that is 264 of the context's 518 MiB,
//!   which the spin kernel never uses. `CU_CTX_LMEM_RESIZE_TO_MAX` is never set (it would
//!   keep a grown reservation). cudarc's event tracking is off: we have no buffers to
//!   track, and it would synchronize when the stream is created.
//!
//! # The launcher: short kernels in bursts, one burst per 20 ms
//!
//! Each [`CudaLoad`] has a thread (`gpufill-launch-{ordinal}`). [`set_load`](gpufill_core::LoadSource::set_load)
//! only updates shared state and returns. The thread works on a grid of periods
//! (default 20 ms), with absolute deadlines so that waking late never shifts later periods:
//!
//! - at each period start, if the previous burst has not finished (checked on its event,
//!   allowing a tenth of a period of lateness), the period is **skipped**: work never
//!   queues up;
//! - otherwise the on-time `duty x period` is split into `ceil(on / max_kernel)` equal
//!   kernels of at most 2 ms ([`plan::plan_burst`]), launched back to back as `width`
//!   one-warp blocks, followed by the event; then the thread sleeps until the next period;
//! - a duty of 0 stops launching, waits for what is queued and sleeps on a condition
//!   variable (no CPU while idle); a duty arriving while idle starts a period at once.
//!
//! Why this shape:
//! - **CPU**: every launch-synchronize-sleep cycle costs tens of microseconds of CPU, so
//!   one wake-up per period (and one launch call per 2 ms of on-time) should keep the
//!   launcher under 1 % of a core, where one cycle per kernel measured 4.5-13 %.
//! - **Getting out of the way**: a stop waits for what is queued, at most one burst (18 ms
//!   at duty 0.9) of kernels of at most 2 ms, far inside the ~85 ms head start NVML gives
//!   on a newcomer; short kernels also bound how long a newcomer waits for our current
//!   kernel once it is there.
//! - **A steady reading**: NVML samples utilization over 200 ms on an H200. A period that
//!   divides it puts exactly 10 bursts in every window, so the reading does not jitter
//!   with the phase between our bursts and NVML's window.
//!
//! # Stopping and dropping
//!
//! [`CudaLoad::quiesce`] stops launching and waits until none of our kernels is queued
//! or running (the CLI's "stopped within 100 ms with the GPU idle"). Dropping a
//! [`CudaLoad`] stops the thread, which waits for its queued kernels and destroys its
//! event, module and stream; then the primary context is released, and the driver frees
//! its memory once no one else in the process holds it. Nothing of ours runs after drop.
//!
//! # Errors, and machines without a driver
//!
//! Every entry point first checks that `libcuda.so.1` can be loaded ([`driver_present`])
//! and returns [`CudaError::NoDriver`] if not: cudarc would panic instead. Driver results
//! are classified once, in [`classify`]: no device or an unusable setup is
//! `Unsupported`, sticky context errors (launch failure, illegal address, ECC, device
//! unavailable) are `Lost`, resource shortages and unknown codes are `Transient`. The
//! launcher thread reports its errors through the next `set_load`; a lost or unsupported
//! device ends the thread, and every later `set_load` returns that error.
//!
//! [`devices`] lists the GPUs (name, NVML-style UUID, SM count) without creating a
//! context.

mod device;
mod error;
mod launcher;
pub mod plan;
pub mod ptx;

pub use device::{CudaDevice, devices, driver_present, driver_version, format_uuid};
pub use error::{CudaError, classify};
pub use launcher::{CudaLoad, LaunchStats, LauncherSettings, MemoryInfo};
pub use ptx::SpinKernel;
