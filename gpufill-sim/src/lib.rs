//! A simulated GPU, so every behaviour of gpufill's loop is tested on machines with no
//! GPU, built on [`gpufill_core`]'s public API alone: its handles implement the core's
//! [`Probe`](gpufill_core::Probe) and [`LoadSource`](gpufill_core::LoadSource), and
//! [`Simulation`] runs the core's [`FillLoop`](gpufill_core::FillLoop) on it in virtual
//! time. It depends on core alone, no GPU crate: gpufill-runtime builds on it, whose
//! `SimOpener` opens it for the runtime's agent, so an agent runs with no GPU, and whose
//! `mps::MpsFollower` follows a simulated MPS daemon. The `gpufill` binary ships it too
//! (`gpufill simulate`, `gpufill bench --sim`: the runtime's modules `simulate` and
//! `bench` run it), which is why it is a crate of its own and not test support.
//!
//! It models what the real one does, as measured (the measurements are in
//! docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes unless another
//! section is named; the numbers below are the model's parameters, chosen to match
//! them, and what follows from them):
//! - **NVML sampling**: the device publishes one integer-percent sample per sampling
//!   period (200 ms by default, configurable), the busy share of that window; the
//!   probe returns each new sample once.
//! - **Our kernels** ([`SimConfig::period`], [`SimConfig::max_kernel`],
//!   [`SimConfig::one_in_flight_kernel`], taken from `load.period_ms`,
//!   `load.max_kernel_us` and `load.beside_kernel_us` by [`SimConfig::with_launch`]):
//!   at each period start a burst of `duty x period`, in kernels of at most
//!   `max_kernel` (by default one kernel a burst); beside quiet holders
//!   ([`gpufill_core::LaunchShape::OneInFlight`], recorded by [`SimLoad`]'s `set_shape`, read
//!   back with [`SimGpu::shape`]) the same bursts, or with `one_in_flight_kernel` set,
//!   one kernel of that length in flight at a time. The model knows where each kernel
//!   lies (`kernels.rs`), for what follows.
//! - **Duty to utilization**: our kernels are resident `duty x (1 - overhead / kernel)`
//!   of the time. With 30 us lost per 1 ms kernel this gives 48.5 / 24.3 / 72.8 % for
//!   50 / 25 / 75 % duty, close to the open-loop shortfall measured with 1 ms kernels;
//!   one 25 ms kernel a burst reads 49.9 % at 50 % duty, 500 us kernels one in flight
//!   47 %.
//! - **Stopping**: after the load goes idle, work already queued keeps running for
//!   `stop_tail` (the real launcher lets at most one burst finish); one in flight, only
//!   the kernel in flight finishes.
//! - **Seeing others** (no MPS; measured:
//!   docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on,
//!   by the retired `live_probe.py`: scripts/RETIRED.md): a kernel of ours that
//!   starts after another context's work (since our previous kernel, which must be
//!   within [`SimConfig::late_start_window`]) starts a switch late, and one during which
//!   another context's work arrives is preempted and ends early: either way
//!   [`SimLoad`]'s `others_seen` is true at the next step. Its `probe` answers whether
//!   anyone ran since our previous kernel however long ago, and is itself a kernel of
//!   ours. MPS clients beside us show in neither.
//! - **Requests** ([`Requests`], [`RequestReport`]): a service's requests one by one,
//!   isolated ([`ForeignJob::isolated_requests`]) or in bursts ([`ForeignJob::service`]).
//!   Without MPS one that arrives while our kernel runs waits the rest of it, at most
//!   the rest of a time slice ([`SimConfig::time_slice`], 2 ms), plus a context switch
//!   ([`SimConfig::context_switch`], 130 us); one that arrives when our context ran last
//!   pays a switch; otherwise nothing. Under MPS it pays `mps_interference x own_duty`
//!   of its length (more for a job that fills every SM: **MPS** below). Calibrated on
//!   measured requests (the `context_switch` docs say how well).
//! - **Filling gaps** ([`gpufill_core::LaunchShape::Gaps`], `--beside-live fill-gaps`;
//!   `gaps.rs`): our kernels of [`gpufill_core::gaps::GAP_KERNEL`] one at a time, an
//!   idle gap of `max(the duty's gap, MIN_GAP)` after each, lengthened by the launch
//!   overhead (a model choice: at full duty one 100 us kernel every 280 us, 36 %
//!   resident); launches paced by the CUDA launcher's [`gpufill_core::GapPacer`], told
//!   each kernel's outcome as the launcher judges it (cut short or queued into the job's
//!   work: busy; a switch late after it: after others; else clear), so no launch for
//!   at least the hold the loop sets ([`SimLoad`]'s `set_gap_hold`, which re-times a
//!   wait under way) after a busy kernel, and none through a spell the pacer predicts.
//!   The physics is the one measured on H200s
//!   (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps),
//!   with this model's switch ([`SimConfig::context_switch`]) and time slice: a job's
//!   work that comes while our kernel runs waits its remainder and a switch, and one
//!   that comes when our context ran last pays a switch (as under **Requests**); a
//!   kernel of ours launched while the job's work is queued gets the GPU at the job's
//!   next launch gap (a training step), or at the end of its time slice or of its work
//!   (a request, queued whole), and, run in the middle of the job's work, costs it two
//!   switches and our kernel. Our kernel **meets** the job when it was running as the
//!   work came, when it was launched while the work was queued (**held back** when it
//!   ended 300 us or more late, the CUDA launcher's rule), and when the job ran since
//!   our previous kernel (the first after its work starts a switch late; the job's next
//!   work then finds our context last and pays a switch).
//!   [`SimLoad`]'s `gaps_seen` reports our kernels, the meetings and those held back.
//!   Each piece of work is weighed when it comes, as every request is; the kernels that
//!   meet it are counted but left out of the utilization (one or two a meeting).
//! - **A training job** ([`ForeignJob::training`], `gpufill simulate --training
//!   START-END:STEP_MS:WAIT_MS`): steps that keep the GPU busy STEP_MS each, in kernels
//!   of 300 us with 20 us launch gaps ([`ForeignJob::TRAINING_KERNEL`],
//!   [`ForeignJob::TRAINING_LAUNCH_GAP`]: model choices for PyTorch eager training, not
//!   measurements), in 10 pieces with host-side gaps between them of 0.45 ms on average
//!   (0.1-3 ms, drawn from a generator seeded with the job's PID:
//!   [`ForeignJob::TRAINING_PIECES`], [`ForeignJob::TRAINING_HOST_GAP`], as
//!   `scripts/gap_trace.py` measured a ResNet-18 step's), then WAIT_MS on its input, one
//!   after another, so whatever delays a step delays all later ones ([`Requests::Steps`]).
//!   Its utilization alone is its busy share; what our kernels cost it is what the model
//!   charged its steps, against a step and its wait alone
//!   ([`RequestReport::rate_slowdown`]).
//!   A decode service ([`ForeignJob::decode_requests`], in the tests) is the same in
//!   pieces, its requests coming as a Poisson process instead of after a wait: most of
//!   a request is host time, as a GPT-2 request's was on H200s.
//! - **Foreign processes** ([`ForeignJob`]): each is listed by the probe from
//!   `listed_at`, runs its first kernel `first_kernel_after` later (NVML lists a
//!   newcomer well before its context is ready), wants the GPU a share `load` of the
//!   time while it works, and leaves. It works from its first kernel on, or only in
//!   `work` and `windows`: the sparse bursts of an inference service
//!   ([`ForeignJob::service`], calibrated on ResNet-50 at batch 1:
//!   docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps) or a notebook's cells
//!   ([`ForeignJob::notebook`]), merely holding its context in between.
//! - **Time-slicing** (no MPS): while both want to run, the foreign job progresses at
//!   `1 - loss x own_duty` of its wanted rate. Beside our bursts `loss` is the job's
//!   `interference`: 0.42 reproduces the measured loss of the 8192^3 matmul loop at
//!   50 % duty, 0.84 that of the 1024^3 synchronised loop (both in the probes section),
//!   0.3 the ResNet-50 service's.
//!   Beside one kernel in flight a request waits at most our kernel's remaining
//!   length, so `loss` is `2 x kernel / request`, capped at `interference`
//!   ([`ForeignJob::loss_per_duty`], whose module docs give the calibration). The
//!   report ([`ForeignReport`]) gives each job's slowdown, its worst single run (a burst,
//!   a cell), and the time our kernels were resident while it ran, in all and one in
//!   flight.
//! - **Per-process samples**: a job shows in the samples of the windows in which it
//!   ran, `process_sample_lag` after their publication, and only once a run of its
//!   kernels has lasted `process_sample_min_run`
//!   ([`SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN`], whose docs say what it was fitted
//!   on).
//! - **MPS**: kernels run together; utilization is the union of the two, and the
//!   foreign job loses `mps_interference x own_duty` (0.015, matching the measured loss
//!   at full duty), plus, for a job whose kernels fill every SM in a few waves
//!   ([`ForeignJob::filling_every_sm`]), its `mps_wave_loss` (0.2) as far as our
//!   kernels outlast a wave ([`SimConfig::mps_wave_factor`]: nothing for our kernels of
//!   40 us or less, all from 500 us; `SimConfig::mps_kernel` is `load.mps_kernel_us`,
//!   50 us). Calibrated on the matmul service under MPS
//!   (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host);
//!   the model is pessimistic by under a point there. A steady load is modelled: the
//!   costs measured beside real training and a sparse service under MPS (the earlier
//!   figures in docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps,
//!   "Under MPS", none distinguishable from zero at the noise measured there) would
//!   come from filling the dips of a job whose utilization wavers, which the model does
//!   not have.
//! - **Faults**: probe calls fail transiently inside configured intervals; after
//!   `lost_at` every call fails with a lost device, until `recovers_at` if set (then
//!   [`SimGpu::open`] works again); at each of `context_breaks` the load sources opened
//!   before it fail as a CUDA context does after a sticky launch error.
//! - **The host's jitter** ([`HostJitter`], `gpufill simulate --host-jitter`): with it
//!   every group of our kernels is timed as the launcher times it, with the stalled
//!   launches and slow resumptions of the host that paused with nobody there
//!   (docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in), and
//!   judged by the launcher's own rule ([`gpufill_core::kernel_timing`]); another context's
//!   switch then shows only through that rule.
//! - **Churn** ([`churn`]): random foreign arrivals from a seeded generator, added and
//!   retired as a long run goes, so memory stays bounded.
//! - **SM activity**: the share of SMs busy, `own_duty x width / sm_count` plus the
//!   foreign jobs' own SM share, for the `sm` metric.
//! - **A PID namespace of our own** ([`SimConfig::pid_view`], `gpufill simulate
//!   --pid-namespace`), as measured (docs/data/ns-signals-h100.txt;
//!   docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy): the
//!   foreign jobs are missing from the process list, while device memory, utilization
//!   and per-process samples (under host PIDs) still show them. Device memory is our
//!   context ([`SimConfig::own_context_bytes`]) plus each job's, plus the driver's share
//!   per context ([`SimConfig::driver_per_context_bytes`]), plus the driver's own moves
//!   ([`SimConfig::driver_memory`]); a newcomer's memory grows as measured, from before
//!   the host view would list it until its first kernel. [`SimConfig::pid_namespace`]
//!   also delays per-process samples as measured
//!   ([`SimConfig::H100_PROCESS_SAMPLE_LAG`]). The probe runs the same
//!   [`gpufill_core::unlisted::UnexplainedMemory`] as the NVML probe. One caveat: time-sliced
//!   busy shares add up here, so a light job beside our fill raises the simulated
//!   utilization, which the hardware did not show (the same section): tests of the
//!   per-process path use jobs too light for the utilization signal.

#![forbid(unsafe_code)]

pub mod churn;
mod config;
mod gaps;
mod handles;
mod jitter;
mod job;
mod kernels;
mod model;
mod requests;
mod rng;
mod run;

pub use churn::{
    Arrivals, LongRunStats, MAX_RANDOM_JOBS_PER_HOUR, Period, RateError, check_random_jobs_per_hour,
};
pub use config::{SimConfig, SimError, SimReport};
pub use handles::{SimGpu, SimLoad, SimProbe};
pub use jitter::HostJitter;
pub use job::{ForeignJob, ForeignReport};
pub use requests::MAX_WAITS_KEPT;
pub use requests::{RequestReport, Requests, Spacing};
pub use rng::Rng;
pub use run::{Churn, ChurnReport, Simulation, Tracking, tracking};
