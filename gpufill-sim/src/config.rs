//! What the simulated GPU is ([`SimConfig`]), what it reports ([`SimReport`]) and how
//! it fails ([`SimError`]).

use std::time::Duration;

use super::jitter::HostJitter;
use super::job::{ForeignJob, ForeignReport};
use gpufill_core::device::{DeviceError, ErrorKind};
use gpufill_core::time::Time;
use gpufill_core::unlisted::PidView;

const MIB: u64 = 1 << 20;

/// What the simulated GPU is and what happens to it.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// NVML's sampling period (the default is the one measured:
    /// docs/benchmarks.md#hardware-tests-run-b).
    pub sample_period: Duration,
    /// Time of the first sample boundary, so samples are not aligned with the loop's ticks.
    pub sample_phase: Duration,
    /// The launcher's period (`load.period_ms`, 50 ms): a burst starts at each period
    /// start, periods counted from time zero.
    pub period: Duration,
    /// The longest kernel of a burst (`load.max_kernel_us`; 50 ms, the period, by
    /// default: one kernel a burst). A burst of `duty x period` is laid out in kernels
    /// of `min(max_kernel, duty x period)`; each loses the launch overhead, and a request
    /// that arrives while one runs waits for the rest of it (at most a time slice).
    pub max_kernel: Duration,
    /// Beside quiet holders ([`gpufill_core::LaunchShape::OneInFlight`]): `Some(kernel)` lays
    /// our load out one kernel of that length in flight at a time with an idle gap after
    /// each (issue 16's shape, `load.beside_kernel_us` above 0); `None` (`0`, the
    /// default) lays it out in bursts as everywhere else. A kernel in flight sets the
    /// launch overhead's share (30 us per 500 us kernel reads 47 % at 50 % duty), what a
    /// request waits behind it, and how long our last kernel runs after the load goes
    /// idle.
    pub one_in_flight_kernel: Option<Duration>,
    /// The GPU's time slice between contexts: a request that arrives while our kernel
    /// runs waits at most the rest of the slice it is in (`kernels.rs`; the default is
    /// the one measured: docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on).
    pub time_slice: Duration,
    /// What a context switch costs the context switched to (the default from how late
    /// our first kernel after another context's work started, in the same section).
    ///
    /// How well these two parameters reproduce the measured requests beside our
    /// kernels, one way and the other: that section's last paragraph, the simulated GPU
    /// against the hardware.
    pub context_switch: Duration,
    /// How recent our previous kernel must be for a kernel's late start to show (1 s):
    /// the launcher judges a start against the offsets of its last kernels, and the GPU
    /// clock drifts against the host's, so lateness is compared only within about a
    /// second. After a longer idle gap only a probe (two kernels compared with
    /// each other) tells whether anyone ran; a kernel preempted while it runs shows
    /// whatever came before it.
    pub late_start_window: Duration,
    /// Busy time lost per kernel (launch overhead, sleep overshoot).
    pub launch_overhead: Duration,
    /// How long queued work keeps running after the load goes idle in
    /// [`gpufill_core::LaunchShape::Bursts`] (one kernel in flight: at most that kernel).
    pub stop_tail: Duration,
    /// Number of SMs (the default is that of the GPU in docs/benchmarks.md#machine).
    pub sm_count: u32,
    /// Whether an MPS server runs (kernels of different processes run together).
    pub mps: bool,
    /// Loss of a foreign job's progress per unit of our duty under MPS.
    pub mps_interference: f64,
    /// Our kernels' length under MPS (`load.mps_kernel_us`, replayed from graphs);
    /// `None`: the bursts' kernels, as without MPS.
    pub mps_kernel: Option<Duration>,
    /// The foreign processes.
    pub foreign: Vec<ForeignJob>,
    /// Intervals `[from, to)` during which probe calls fail transiently.
    pub probe_faults: Vec<(Time, Time)>,
    /// From this time on the device is lost.
    pub lost_at: Option<Time>,
    /// When set, the lost device comes back at this time (a reset GPU, a reloaded
    /// driver): calls succeed again, and probes and load sources opened from then on work.
    pub recovers_at: Option<Time>,
    /// At each of these times the CUDA context in use breaks (a sticky launch error):
    /// load sources opened before it fail with a lost context from then on, sources
    /// opened later work.
    pub context_breaks: Vec<Time>,
    /// Which PIDs our probe sees. [`PidView::Namespace`]: the foreign jobs are missing
    /// from the process list, as inside a PID namespace of our own, while device memory,
    /// utilization and per-process samples (under their host PIDs) still show them.
    pub pid_view: PidView,
    /// The memory NVML lists for our own context (the default is the one measured with
    /// the stack limit at 0: docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes).
    pub own_context_bytes: u64,
    /// Device memory the driver holds per context besides its listed size (the default
    /// is the one measured:
    /// docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy).
    pub driver_per_context_bytes: u64,
    /// The driver's own memory moving, in time order: from each time on, this many bytes
    /// more (negative: fewer) than before. Empty: flat, as measured.
    pub driver_memory: Vec<(Time, i64)>,
    /// Whether the probe gets per-process memory sizes (without them the memory signal
    /// cannot work: [`gpufill_core::unlisted::Unlisted::Unknown`]).
    pub process_sizes: bool,
    /// How long after its publication a sample shows in the per-process samples (0 by
    /// default; as measured inside a PID namespace:
    /// [`SimConfig::H100_PROCESS_SAMPLE_LAG`]).
    pub process_sample_lag: Duration,
    /// How long a foreign job must have run kernels without a break before the
    /// per-process samples show it (0 by default: at once). With
    /// [`SimConfig::MEASURED_PROCESS_SAMPLE_MIN_RUN`] a service's short bursts never show,
    /// as measured (that constant's docs).
    pub process_sample_min_run: Duration,
    /// The host's own jitter in our kernels' timing (`gpufill simulate --host-jitter`):
    /// `Some` times every group of ours as the launcher does and judges it with the
    /// launcher's rule ([`super::HostJitter`]); `None` (the default) reports another
    /// context's switch and preemptions directly.
    pub host_jitter: Option<HostJitter>,
}

impl SimConfig {
    /// How late the per-process samples showed a new PID's work, in both PID views, as
    /// measured (docs/data/ns-signals-h100.txt;
    /// docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy).
    pub const H100_PROCESS_SAMPLE_LAG: Duration = Duration::from_millis(2600);

    /// How long a job's work went unseen by the per-process samples. A ResNet-50
    /// service's short bursts never made gpufill yield in `activity` mode: they ended
    /// before its per-process samples showed them
    /// (docs/benchmarks.md#beside-a-mostly-idle-service-and-under-mps,
    /// "`activity` beside a service's bursts"); steady work made it yield within a
    /// second or two of the work beginning (docs/benchmarks.md#activity-mode-scriptsactivity_checkpy,
    /// and its first run in
    /// docs/benchmarks-history.md#activity-mode-the-first-run-at-the-previous-defaults).
    /// Why NVML misses short bursts is not known; the simplest model that fits the bursts
    /// and the quickest of those yields is that a run shows only once it has lasted this
    /// long (then at the next sample, read at most once per sample period).
    pub const MEASURED_PROCESS_SAMPLE_MIN_RUN: Duration = Duration::from_millis(400);

    /// The view from inside a PID namespace of our own, as measured: foreign jobs
    /// unlisted, per-process samples [`SimConfig::H100_PROCESS_SAMPLE_LAG`] late.
    pub fn pid_namespace(self) -> Self {
        SimConfig {
            pid_view: PidView::Namespace,
            process_sample_lag: Self::H100_PROCESS_SAMPLE_LAG,
            ..self
        }
    }

    /// The same model with our kernels `kernel` long under MPS (`None`: the bursts').
    pub fn with_mps_kernel(self, kernel: Option<Duration>) -> Self {
        SimConfig {
            mps_kernel: kernel,
            ..self
        }
    }

    /// How much of a job's [`ForeignJob::mps_wave_loss`] our kernels cost it: none for
    /// kernels within [`SimConfig::MPS_WAVE`] (a block that waits for ours waits less
    /// than its own wave), all of it from [`SimConfig::MPS_WAVE_SATURATION`] on,
    /// linear between. Calibrated on the matmul service under MPS at duty 0.5, whose cost
    /// fell with our kernels' length to nothing measurable at the shortest
    /// (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host).
    pub fn mps_wave_factor(&self) -> f64 {
        let kernel = self.mps_kernel.unwrap_or(self.max_kernel).as_secs_f64();
        let (wave, full) = (
            Self::MPS_WAVE.as_secs_f64(),
            Self::MPS_WAVE_SATURATION.as_secs_f64(),
        );
        ((kernel - wave) / (full - wave)).clamp(0.0, 1.0)
    }

    /// What one unit of our duty costs `job` under MPS: `mps_interference`, and its
    /// wave loss as far as our kernels' length makes it ([`SimConfig::mps_wave_factor`]).
    pub fn mps_loss(&self, job: &ForeignJob) -> f64 {
        self.mps_interference + job.mps_wave_loss * self.mps_wave_factor()
    }

    /// Kernels of ours up to this long cost a few-wave job nothing under MPS
    /// ([`SimConfig::mps_wave_factor`]).
    pub const MPS_WAVE: Duration = Duration::from_micros(40);

    /// Kernels of ours from this long on cost a few-wave job its whole
    /// [`ForeignJob::mps_wave_loss`] under MPS.
    pub const MPS_WAVE_SATURATION: Duration = Duration::from_micros(500);

    /// Our kernels laid out as the launcher's settings say: `period`, the longest kernel
    /// of a burst, and the kernel in flight beside quiet holders (`None`: bursts there
    /// too), as the CUDA launcher's `LauncherSettings` give them.
    pub fn with_launch(
        self,
        period: Duration,
        max_kernel: Duration,
        beside_kernel: Option<Duration>,
    ) -> Self {
        SimConfig {
            period,
            max_kernel,
            one_in_flight_kernel: beside_kernel,
            ..self
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sample_period: Duration::from_millis(200),
            sample_phase: Duration::from_millis(73),
            period: Duration::from_millis(50),
            max_kernel: Duration::from_millis(50),
            one_in_flight_kernel: None,
            time_slice: Duration::from_millis(2),
            context_switch: Duration::from_micros(130),
            late_start_window: Duration::from_secs(1),
            launch_overhead: Duration::from_micros(30),
            stop_tail: Duration::from_millis(10),
            sm_count: 132,
            mps: false,
            mps_interference: 0.015,
            mps_kernel: None,
            foreign: Vec::new(),
            probe_faults: Vec::new(),
            lost_at: None,
            recovers_at: None,
            context_breaks: Vec::new(),
            pid_view: PidView::Host,
            own_context_bytes: 254 * MIB,
            driver_per_context_bytes: 8 * MIB,
            driver_memory: Vec::new(),
            process_sizes: true,
            process_sample_lag: Duration::ZERO,
            process_sample_min_run: Duration::ZERO,
            host_jitter: None,
        }
    }
}

/// What happened in the simulation so far.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// Per foreign job.
    pub foreign: Vec<ForeignReport>,
    /// Total time our kernels were resident.
    pub own_busy: Duration,
    /// Samples published so far.
    pub samples: u64,
    /// Probes so far ([`gpufill_core::LoadSource::probe`]).
    pub probes: u64,
    /// With [`SimConfig::host_jitter`]: our groups of kernels timed so far, and how many
    /// of them the host stalled.
    pub host_stalls: Option<(u64, u64)>,
}

/// An error of the simulated device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A configured transient probe fault.
    #[error("simulated probe fault")]
    Transient,
    /// The device is lost.
    #[error("simulated GPU lost")]
    Lost,
    /// The load source's context broke (a sticky launch error); a new one works.
    #[error("simulated CUDA context broken: launch failed")]
    ContextBroken,
}

impl DeviceError for SimError {
    fn kind(&self) -> ErrorKind {
        match self {
            SimError::Transient => ErrorKind::Transient,
            SimError::Lost | SimError::ContextBroken => ErrorKind::Lost,
        }
    }
}
