//! gpufill's load source: a spin kernel launched through the CUDA driver API.
//!
//! [`CudaLoad`] implements [`gpufill_core::LoadSource`] for one GPU. The control loop
//! says what share of time our kernels should be resident (the duty) and how wide they
//! are; this crate makes it so, using as little of the GPU, its memory and the CPU as it
//! can, and getting out of the way fast. It holds no control logic. Most of gpufill's
//! `unsafe` is here (the driver calls; the runtime and the binary have a few libc calls,
//! listed in docs/ARCHITECTURE.md); every block says why it is sound.
//!
//! # The kernel
//!
//! `gpufill-cuda/kernels/spin.cu`, shipped as PTX for `sm_70` at ISA 7.0 ([`ptx::SPIN_PTX`]) and
//! JIT-compiled by the driver: every thread busy-waits on `%globaltimer` for a number of
//! nanoseconds passed as its only argument. A wall-clock wait keeps its length whatever
//! the SM clock does. It touches no memory and has no stack frame, so we allocate
//! nothing on the device: the duration is the kernel argument. (Under MPS the driver
//! holds a little device memory for the graphs our bursts are replayed from: below.)
//!
//! # The context, and its memory
//!
//! - The device's **primary context**, the one every CUDA runtime program in the process
//!   would share, never an extra one: one context per process and GPU is the floor of what
//!   `nvidia-smi` shows for us.
//! - **Blocking sync**, set with `cuDevicePrimaryCtxSetFlags` before retaining it (works on
//!   any driver, unlike `cuCtxSetFlags`, which needs 12.1), so a wait on the context sleeps
//!   instead of spinning a core. We never wait on the GPU while filling: our one event is
//!   created with `CU_EVENT_DISABLE_TIMING` only and is queried, never waited on, so its
//!   completion raises no interrupt for the driver's event thread to handle.
//! - **Stack limit 0**, right after creation. The driver reserves stack size x resident
//!   threads x SMs of device memory, a large share of a default context's memory
//!   (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes), and the spin
//!   kernel never uses it. `CU_CTX_LMEM_RESIZE_TO_MAX` is never set (it would
//!   keep a grown reservation). cudarc's event tracking is off: we have no buffers to
//!   track, and it would synchronize when the stream is created.
//!
//! # The launcher: bursts of short kernels, launched from the loop's thread
//!
//! In the default shape, [`LaunchShape::Bursts`](gpufill_core::LaunchShape), [`CudaLoad`]
//! runs no thread of its own. [`set_load`](gpufill_core::LoadSource::set_load)
//! records the load; [`launch_due`](gpufill_core::LoadSource::launch_due), which the fill
//! loop calls at every tick right after it read the process list, launches the burst of a
//! period that has begun ([`plan::Pacer`]):
//!
//! - a period (default 50 ms, a whole number of ticks) begins at the first call at least
//!   three quarters of a period after the previous one began; its burst is `duty x` the
//!   time since then, in `ceil(duty x period / max_kernel)` equal kernels of at most 2 ms
//!   ([`plan::plan_burst`]), launched back to back as `width` one-warp blocks on our
//!   lowest-priority stream, followed by the event;
//! - if the previous burst is still running (the event says so) and was planned to end
//!   more than a tenth of a period ago, another context has slowed it: the period is
//!   **skipped**, so work never piles up. One that is just ending (full duty) gets the next
//!   burst queued behind it, so the GPU does not idle between them;
//! - a duty of 0 launches nothing more; what is queued (about one burst at most: a burst
//!   queued behind one just ending adds at most a tenth of a period) finishes.
//!
//! Why this shape:
//! - **Never on a stale list**: a burst starts only microseconds after the process check
//!   of the same tick, so no kernel of ours starts once a newcomer is listed. When one is
//!   listed, at most the burst already queued is left, `duty x period`, inside the head
//!   start NVML gives between listing a PyTorch process and its first kernel
//!   (docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes and
//!   docs/benchmarks.md#launching-from-the-loops-thread-cpu-and-the-50-ms-defaults).
//! - **CPU**: one wake-up per period does the process check and the launch. The wake-up,
//!   NVML's process check (cold after each sleep, so dearer than in a tight loop) and a
//!   burst's launch each cost tens of microseconds of CPU, however little work they do,
//!   so the number of wake-ups, set by the period, sets the CPU; a launcher thread of its
//!   own, as before, cost more (docs/benchmarks.md#launching-from-the-loops-thread-cpu-and-the-50-ms-defaults,
//!   "Where a tick's CPU goes").
//! - **A reading that follows the duty**: NVML publishes one utilization value per
//!   sample period (one GPU's: docs/benchmarks.md#hardware-tests-run-b). With 20, 25 and
//!   50 ms periods it read the duty at every target; with 40 ms it read several points
//!   off, depending on the phase between our bursts and its window, and the phase drifts
//!   (docs/benchmarks.md#launching-from-the-loops-thread-cpu-and-the-50-ms-defaults, "The period
//!   must suit NVML's reading", which also says which periods are safe on the GPU
//!   measured).
//!
//! # Beside a quiet process: one kernel in flight, from a thread of ours
//!
//! While the loop fills beside another process that holds a context but is quiet (an
//! inference service between requests, an idle notebook) it asks for
//! [`LaunchShape::OneInFlight`](gpufill_core::LaunchShape). Without MPS the GPU
//! time-slices between contexts: our *queued* work makes a newly arriving foreign kernel
//! wait up to a time slice, one short kernel of ours in flight only what is left of it
//! (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps, "Launch
//! shapes" and "Earlier notes"). So then no bursts: a pacing thread that [`CudaLoad`] owns, started by
//! `launch_due` with a non-idle load, launches one kernel of
//! [`LauncherSettings::beside_kernel`] (500 us) at a time, sleeps its length and the
//! gap `kernel x (1 - duty) / duty` ([`plan::one_in_flight_gap`]), checks the event
//! (polling on, then resting the gap, if another context slowed the kernel), and
//! launches the next. Two of our kernels are never queued at once; the thread's first
//! kernel waits for a burst still queued.
//!
//! The thread exists only in that shape with a non-idle load: because the gaps (500 us
//! at half duty) are far shorter than a tick and the next kernel must follow the last
//! one's end, which only a thread that waits for it can see in time. The decision to
//! yield stays at the tick: the loop still reads the process list at every tick, and
//! the idle load (or a switch back to bursts, [`CudaLoad::quiesce`], release, drop) stops
//! the thread at once, waking it from any wait, within the tick; what is left of ours
//! on the GPU is the one kernel in flight, at most `beside_kernel`. A launch error in
//! the thread stops it and is returned, classified as any other, by the next
//! `set_load` or `launch_due`. The cost is CPU: a wake-up per kernel, `duty /
//! beside_kernel` kernels a second.
//!
//! # Beside live work without MPS: filling its gaps, from the same thread
//!
//! With `yield.beside_live = "fill_gaps"` the loop fills beside a process that works and
//! asks for [`LaunchShape::Gaps`](gpufill_core::LaunchShape). The pacing thread runs the
//! same cycle as one in flight, whatever `beside_kernel` is: one kernel of
//! [`GAP_KERNEL`](gpufill_core::gaps::GAP_KERNEL) (100 us) at a time at the load's
//! width, then an idle gap of the duty's, but never less than
//! [`MIN_GAP`](gpufill_core::gaps::MIN_GAP), a context switch and a little more, so that
//! a job that is ready when our kernel ends gets the GPU before our next launch
//! ([`plan::Cycle::gap`]; the physics: `gpufill_core::gaps`). A kernel whose timing
//! shows another context (held back, started late, cut short, ran long) met the job: it
//! is counted, and the thread launches nothing for the hold the loop set with
//! [`set_gap_hold`](gpufill_core::LoadSource::set_gap_hold), then goes on by itself;
//! the loop reads what the kernels met with
//! [`gaps_seen`](gpufill_core::LoadSource::gaps_seen) and sets the hold that keeps its
//! cost estimate under the bound. Nothing goes to `others_seen`: the policy does not
//! pause while filling gaps. The CPU is a wake-up per kernel, as one in flight.
//!
//! # Under MPS: the same on-time in short kernels, replayed from graphs
//!
//! Under MPS our kernels run beside other clients' kernels rather than taking turns,
//! and a client's block that needs a whole SM cannot start on the SM where our warp
//! runs: it waits for our kernel to end
//! (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host). With
//! [`LauncherSettings::graph_kernel`] (the runtime sets it where an MPS daemon runs) a
//! burst is its on-time in kernels of that length (50 us), launched from CUDA graphs of
//! 1, 2, 4 ... 256 kernels captured on our stream the first time a burst needs them
//! (`graphs::KernelGraphs`): a 25 ms burst is 500 kernels in 6 graph launches. The graphs
//! hold a little device memory (measured: the same section).
//!
//! # Stopping and dropping
//!
//! [`CudaLoad::quiesce`] stops the pacing thread if one runs, then waits (polling the
//! event) until none of our kernels is queued or running (the CLI's "stopped with the GPU
//! idle"). Dropping a [`CudaLoad`] does the same, then destroys its event, module and
//! stream and releases the primary context; the driver frees its memory once no one else
//! in the process holds it. Nothing of ours runs after drop.
//!
//! # Errors, and machines without a driver
//!
//! Every entry point first checks that `libcuda.so.1` can be loaded ([`driver_present`])
//! and returns [`CudaError::NoDriver`] if not: cudarc would panic instead. Driver results
//! are classified once, in [`classify`]: no device or an unusable setup is
//! `Unsupported`, sticky context errors (launch failure, illegal address, ECC, device
//! unavailable) are `Lost`, resource shortages and unknown codes are `Transient`.
//! `launch_due` returns a failed launch at once; after a lost or unsupported one, every
//! later call returns that error, and the caller opens a new context
//! (`gpufill_core::Reopening`).
//!
//! [`devices`] lists the GPUs (name, NVML-style UUID, SM count) without creating a
//! context.

mod device;
mod error;
mod graphs;
mod launcher;
#[cfg(test)]
mod no_driver;
mod others;
mod pacing;
pub mod plan;
pub mod ptx;
mod spin;

pub use device::{CudaDevice, devices, driver_present, driver_version, format_uuid};
pub use error::{CudaError, classify};
pub use launcher::{CudaLoad, LaunchStats, LauncherSettings, MemoryInfo};
pub use ptx::SpinKernel;
