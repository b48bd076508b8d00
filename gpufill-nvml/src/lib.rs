//! gpufill's [`Probe`](gpufill_core::Probe) over NVML: how busy a GPU is and who else
//! is on it.
//!
//! NVML is loaded at run time (nvml-wrapper opens `libnvidia-ml.so.1` with
//! `dlopen`), so this crate builds and its unit tests run on machines without a GPU;
//! there [`Nvml::init`] returns a clear
//! [`ErrorKind::Unsupported`](gpufill_core::ErrorKind::Unsupported) error instead of
//! failing to start. The crate holds no control logic: it measures, and it classifies
//! NVML's errors. The arithmetic it does need (when samples arrive, own-process
//! identification, filtering per-process samples) is in pure functions tested on CPU.
//!
//! # Pieces
//! - [`Nvml`]: the process's NVML session (`Copy`); [`Nvml::gpus`] lists GPUs for
//!   `gpufill status`; [`Nvml::snapshot`] gives the snapshots for
//!   [`identify_own_context`] ([`Nvml::compute_pids`] those for the older
//!   [`identify_own`], without sizes).
//! - [`pid_view`]: whether NVML's process list is complete here ([`PidView`](gpufill_core::PidView)).
//! - [`NvmlProbe`]: [`Probe`](gpufill_core::Probe) for one GPU, addressed by UUID
//!   (NVML indices and CUDA ordinals can differ; the CLI matches them by UUID), plus
//!   per-process SM utilization, GPM SM activity, own memory and power.
//! - [`MetricProbe`]: the probe `run` uses: [`NvmlProbe`]'s utilization, or for the `sm`
//!   metric GPM SM utilization every [`GPM_PERIOD`]; [`check_gpm`] says up front whether
//!   a GPU can give it.
//! - [`ProbeError`] and [`classify`]: every NVML error mapped once to transient,
//!   unsupported or lost.
//!
//! # Utilization: one reading per NVML sample
//! NVML's `gpu` utilization is the share of the last *sample period* with a kernel
//! resident; the driver publishes one value per period (1/6 s to 1 s by product; one
//! GPU's: docs/benchmarks.md#hardware-tests-run-b). The loop runs its controller only
//! on new samples, so
//! [`Probe::utilization`](gpufill_core::Probe::utilization) returns `Some` exactly
//! once per published sample. `nvmlDeviceGetSamples` says when samples were published
//! but costs milliseconds a call, too much for every tick; `nvmlDeviceGetUtilizationRates`
//! is cheap but carries no timestamp (docs/benchmarks.md#hardware-tests-run-b). So:
//!
//! 1. On the first call and then every 10 s, the probe reads the sample timestamps,
//!    takes the period as the median gap and the phase from the newest one (NVML
//!    timestamps are CPU wall-clock microseconds; pairing `SystemTime::now()` with the
//!    loop's `now` maps them onto the loop's timeline).
//! 2. In between, it reads the cheap value a quarter period after each expected
//!    publication, where driver jitter cannot make it see one sample twice or miss one.
//! 3. When the buffer holds nothing new (`NotFound`: an idle GPU stops sampling and
//!    reads 0 %) it keeps the period it has (200 ms at first) and looks again in 1 s;
//!    where `nvmlDeviceGetSamples` is unsupported it polls every 200 ms.
//!
//! # Foreign processes, and finding our own
//! [`Probe::foreign_processes`](gpufill_core::Probe::foreign_processes) lists the
//! device's compute processes (microseconds a call; a newcomer shows up soon after it
//! starts creating its context, well before its first kernel:
//! docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes), adds MPS clients where
//! the driver lists them, and removes our own PIDs and the MPS server (by name, when
//! NVML can resolve it: the server is infrastructure, not a workload).
//!
//! Our own entry: on driver 580 NVML lists us under `std::process::id()` in the host's
//! PID namespace and in one of our own alike. The CLI snapshots the device
//! ([`Nvml::snapshot`]) just before and just after creating its CUDA context and passes
//! both to [`identify_own_context`]: our own PID if listed; else the PIDs that appeared,
//! as candidates that the probe re-checks while running: a newcomer that started with
//! us, or a later process reusing a candidate's PID, is found out by its memory or its
//! work and becomes foreign ([`OwnProcess::recheck_list`],
//! [`OwnProcess::recheck_work`]). It also learns our context's memory, for the next
//! section.
//!
//! # Inside a PID namespace of our own
//! [`pid_view`] reads `/proc/self/ns/pid` once. In a PID namespace of our own (a
//! container without `hostPID`) NVML lists only our namespace's processes, so the probe,
//! built [`with_pid_view`](NvmlProbe::with_pid_view), also reads device memory every
//! tick and reports what the listed processes do not explain
//! ([`Probe::unlisted`](gpufill_core::Probe::unlisted)); per-process samples keep
//! others' host PIDs. The signals, their leads and lags are in `gpufill_core::unlisted`.
//!
//! # Errors: transient, unsupported, lost
//! [`classify`] maps each NVML error. *Unsupported*: this cannot work here, whatever
//! the retries (no driver, an old driver lacking a symbol, no permission, MIG).
//! *Lost*: the GPU fell off the bus, needs a reset, or the session is gone
//! (`Uninitialized` after init): stop using the device. *Transient*: everything else
//! (timeouts, `Unknown`, a process list that grew between NVML's count and read):
//! the loop holds its last decision and asks again on the next tick.
//!
//! # Hardware tests
//! `cargo test --release -p gpufill-nvml --test hardware -- --ignored --nocapture`
//! on a machine with an NVIDIA GPU (GPU 0; set `GPUFILL_TEST_GPU` to a UUID to pick
//! another).

#![forbid(unsafe_code)]

mod error;
mod own;
mod probe;
mod sample_timing;
mod session;
mod sm;
mod view;

pub use error::{ProbeError, classify};
pub use own::{
    OWN_MEMORY_TOLERANCE, OwnProcess, Snapshot, WORK_STRIKES, identify_own, identify_own_context,
};
pub use probe::NvmlProbe;
pub use session::{GpuInfo, Nvml, ProcessEntry};
pub use sm::{GPM_PERIOD, GpmCadence, GpmRefusal, MetricProbe, check_gpm, gpm_refusal};
pub use view::pid_view;
