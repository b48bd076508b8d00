//! A simulated GPU, so every behaviour of the loop is tested on machines with no GPU.
//!
//! It models what the real one does, as measured on an H200 (the measurements are in
//! docs/benchmarks.md, "The GPU itself, measured before gpufill (probes)"; the numbers below are the model's parameters, chosen to match them):
//! - **NVML sampling**: the device publishes one integer-percent sample per sampling
//!   period (200 ms by default, configurable), the busy share of that window; the
//!   probe returns each new sample once.
//! - **Duty to utilization**: our kernels are resident `duty x (1 - overhead / kernel)`
//!   of the time. With 30 us lost per 1 ms kernel this gives 48.5 / 24.3 / 72.8 % for
//!   50 / 25 / 75 % duty, close to the open-loop shortfall measured with 1 ms kernels.
//! - **Stopping**: after the load goes idle, work already queued keeps running for
//!   `stop_tail` (the real launcher lets at most one burst finish).
//! - **Foreign processes**: each is listed by the probe from `listed_at`, runs its first
//!   kernel `first_kernel_after` later (NVML lists a newcomer well before its context is
//!   ready), wants the GPU a share `load` of the time, and leaves.
//! - **Time-slicing** (no MPS): while both want to run, the foreign job progresses at
//!   `1 - interference x own_duty` of its wanted rate. `interference` 0.42 reproduces
//!   the measured loss of the 8192^3 matmul loop at 50 % duty; 0.84 that of the 1024^3
//!   synchronised loop. The report gives each job's slowdown and the time our kernels were
//!   resident while it was active.
//! - **MPS**: kernels run together; utilization is the union of the two, and the
//!   foreign job loses `mps_interference x own_duty` (0.015, matching the measured loss
//!   at full duty).
//! - **Faults**: probe calls fail transiently inside configured intervals; after
//!   `lost_at` every call fails with a lost device, until `recovers_at` if set (then
//!   [`SimGpu::open`] works again); at each of `context_breaks` the load sources opened
//!   before it fail as a CUDA context does after a sticky launch error.
//! - **Churn** ([`churn`]): random foreign arrivals from a seeded generator, added and
//!   retired as a long run goes, so memory stays bounded.
//! - **SM activity**: the share of SMs busy, `own_duty x width / sm_count` plus the
//!   foreign jobs' own SM share, for the `sm` metric.
//! - **A PID namespace of our own** ([`SimConfig::pid_view`], `gpufill simulate
//!   --pid-namespace`), as measured on an H100 (docs/data/ns-signals-h100.txt): the
//!   foreign jobs are missing from the process list, while device memory, utilization
//!   and per-process samples (under host PIDs) still show them. Device memory is our
//!   context (254 MiB) plus each job's, plus 8 MiB of driver share per context, plus
//!   the driver's own moves ([`SimConfig::driver_memory`]); a newcomer's memory grows
//!   as the H100 showed it, from 36 ms before the host view would list it until its
//!   first kernel. [`SimConfig::pid_namespace`] also delays per-process samples by the
//!   2.6 s the H100 took to show a new PID's work. The probe runs the same
//!   [`crate::unlisted::UnexplainedMemory`] as the NVML probe. One caveat: time-sliced
//!   busy shares add up here, so a light job beside our fill raises the simulated
//!   utilization, which the H100 did not show (docs/benchmarks.md, "Inside a PID namespace of its own"): tests of the
//!   per-process path use jobs too light for the utilization signal.

pub mod churn;
mod model;
mod run;

pub use churn::{
    Arrivals, LongRunStats, MAX_RANDOM_JOBS_PER_HOUR, Period, RateError, Rng,
    check_random_jobs_per_hour,
};
pub use model::{
    ForeignJob, ForeignReport, SimConfig, SimError, SimGpu, SimLoad, SimProbe, SimReport,
};
pub use run::{Churn, ChurnReport, Simulation, Tracking, tracking};
