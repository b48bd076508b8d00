//! [`NvmlProbe`]: the [`Probe`] of one GPU, plus per-process, GPM and power readings.
//!
//! # Inside a PID namespace of our own
//! With [`PidView::Namespace`] ([`NvmlProbe::with_pid_view`]) NVML lists only our
//! namespace's processes, and the probe adds what the device shows of the others
//! ([`gpufill_core::unlisted`] has the signals and their measured leads and lags,
//! docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy
//! the figures, docs/data/ns-signals-h100.txt the data):
//! - every tick, [`Probe::unlisted`] reads device memory (`nvmlDeviceGetMemoryInfo` v2
//!   `used`, one more cheap NVML call) against the sizes of the list just read (always a
//!   full read in this view: a count cannot tell whether our own entry's size moved) and
//!   reports memory beyond them as [`Unlisted::Memory`]; where the driver gives no sizes
//!   or no memory reading, [`Unlisted::Unknown`];
//! - [`Probe::active_processes`] returns samples of PIDs that are not ours whether
//!   listed or not: NVML gives others' samples under their host PIDs, which the policy
//!   reads as work of an unlisted process. A host PID that happens to equal one of our
//!   namespace's PIDs would be taken for that process (host PIDs of GPU jobs are rarely
//!   that small).
//!
//! In the host view ([`PidView::Host`], the default) none of this runs and the probe
//! behaves as it always has.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use gpufill_core::{
    ErrorKind, Load, MemoryReading, PidView, Probe, ProcessInfo, Time, UnexplainedMemory, Unlisted,
    Utilization,
};
use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample;
use nvml_wrapper::{Device, GpmSample};

use crate::error::{ProbeError, classify};
use crate::own::OwnProcess;
use crate::sample_timing::SampleTiming;
use crate::session::{
    Nvml, add_mps_clients, compute_processes, mig_enabled, milliwatts_to_watts, running_processes,
};

/// NVML refreshes GPM data internally; samples closer than this give no metric
/// (nvml.h, `nvmlGpmMetricsGet`: "should be greater than 100ms").
const GPM_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The MPS server's executable: infrastructure, listed as a compute process while
/// MPS runs, never a workload to yield to.
const MPS_SERVER: &str = "nvidia-cuda-mps-server";

/// Measures one GPU through NVML: utilization once per NVML sample period, foreign
/// compute processes every call. See the crate docs for the design.
#[derive(Debug)]
pub struct NvmlProbe {
    nvml: Nvml,
    device: Device<'static>,
    uuid: String,
    index: u32,
    own: OwnProcess,
    timing: SampleTiming,
    /// Cleared once the MPS process list proves unsupported.
    try_mps: bool,
    /// Whether each PID seen is the MPS server (names are looked up once per PID).
    names: HashMap<u32, Option<String>>,
    next_activity_read: Option<Time>,
    process_last_seen_us: u64,
    quiet: QuietList,
    /// The foreign processes of the last full read, which a matching count stands for.
    last_foreign: Vec<ProcessInfo>,
    gpm_supported: Option<bool>,
    gpm_previous: Option<(GpmSample<'static>, Instant)>,
    view: PidView,
    /// The sizes of the last full process list (all entries, ours included) and how
    /// many entries; `None` for the sum when one had no size.
    listed_memory: (Option<u64>, u32),
    memory: UnexplainedMemory,
    /// Cleared once device memory proves unreadable.
    memory_readable: bool,
    /// Our own load's history, to re-check own-PID candidates against their samples.
    own_load: OwnLoad,
    next_own_check: Option<Time>,
    /// Foreign PIDs with kernels seen by an own-PID check, for the next
    /// `active_processes`.
    pending_active: Vec<u32>,
}

/// Since when (wall-clock microseconds, NVML's sample clock) our load has been idle or
/// busy, from [`Probe::note_load`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OwnLoad {
    busy: bool,
    since_us: Option<u64>,
}

/// How long after a stop our last burst may still run (at most `duty x 50 ms`), as
/// margin when deciding that we ran nothing in a sample's window.
const STOP_TAIL_US: u64 = 100_000;

/// How often per-process samples are read to tell several own-PID candidates apart
/// (over a millisecond a read: docs/benchmarks.md#hardware-tests-run-b).
const OWN_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How often per-process utilization is read for the yield policy. Each read costs
/// over a millisecond of CPU (what reading it every sample period cost:
/// docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on,
/// below the table); what it decides, whether a process has been
/// quiet for the idle grace (30 s by default), needs no finer grain, and beside a quiet
/// holder our own kernels' timing sees its first kernel sooner than any sample could.
pub const ACTIVITY_EVERY: Duration = Duration::from_secs(1);

/// The most foreign PIDs kept from own-PID checks for `active_processes`.
const PENDING_ACTIVE_MAX: usize = 256;

impl NvmlProbe {
    /// A probe for the GPU `uuid`, where `own` are gpufill's own PIDs on it
    /// ([`crate::identify_own`]).
    ///
    /// # Errors
    /// [`ProbeError::NoSuchGpu`]; [`ProbeError::MigEnabled`]; an unsupported error
    /// when the GPU has no utilization counter; or any classified NVML error.
    pub fn new(nvml: Nvml, uuid: &str, own: OwnProcess) -> Result<Self, ProbeError> {
        let device = nvml.device(uuid)?;
        let nvml_err = |call| move |e| ProbeError::nvml(call, e);
        let uuid = device.uuid().map_err(nvml_err("nvmlDeviceGetUUID"))?;
        if mig_enabled(&device)? {
            return Err(ProbeError::MigEnabled { uuid });
        }
        // Fail now rather than on the loop's first tick if there is no counter.
        device
            .utilization_rates()
            .map_err(nvml_err("nvmlDeviceGetUtilizationRates"))?;
        Ok(NvmlProbe {
            index: device.index().map_err(nvml_err("nvmlDeviceGetIndex"))?,
            nvml,
            device,
            uuid,
            own,
            timing: SampleTiming::default(),
            try_mps: true,
            names: HashMap::new(),
            next_activity_read: None,
            process_last_seen_us: 0,
            quiet: QuietList::default(),
            last_foreign: Vec::new(),
            gpm_supported: None,
            gpm_previous: None,
            view: PidView::Host,
            listed_memory: (Some(0), 0),
            memory: UnexplainedMemory::new(),
            memory_readable: true,
            own_load: OwnLoad::default(),
            next_own_check: None,
            pending_active: Vec::new(),
        })
    }

    /// The probe with PID view `view` ([`crate::pid_view`]): with
    /// [`PidView::Namespace`] it looks beyond the process list (module docs).
    #[must_use]
    pub fn with_pid_view(mut self, view: PidView) -> Self {
        self.view = view;
        self
    }

    /// The PID view the probe reads with.
    pub fn pid_view(&self) -> PidView {
        self.view
    }

    /// The GPU's UUID.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The GPU's NVML index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Our own PIDs on this GPU.
    pub fn own(&self) -> &OwnProcess {
        &self.own
    }

    /// The NVML sample period in use: learned from the device after the first
    /// [`Probe::utilization`] call, 200 ms until then.
    pub fn sample_period(&self) -> Duration {
        self.timing.period()
    }

    /// Whether reads are aligned to the device's sample times (else they are merely
    /// one period apart: before the first resync, while idle, or where
    /// `nvmlDeviceGetSamples` is unsupported).
    pub fn sample_phase_known(&self) -> bool {
        self.timing.phase_known()
    }

    /// Per-process SM utilization since the previous call, as `(pid, percent)` sorted
    /// by PID: the latest sample of each process. Processes with no kernel in that
    /// time are absent; nothing new (NVML's `NotFound`) gives an empty list.
    ///
    /// # Errors
    /// A classified NVML error (unsupported under MIG).
    pub fn process_utilization(&mut self) -> Result<Vec<(u32, u32)>, ProbeError> {
        Ok(self
            .process_samples()?
            .into_iter()
            .map(|s| (s.pid, s.sm_util))
            .collect())
    }

    /// The fresh per-process samples since the previous read (see
    /// [`fresh_process_utilization`]), with the own-PID candidates checked against them.
    fn process_samples(&mut self) -> Result<Vec<ProcessSample>, ProbeError> {
        let samples = match self
            .device
            .process_utilization_stats(self.process_last_seen_us)
        {
            Ok(samples) => samples,
            Err(NvmlError::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(ProbeError::nvml("nvmlDeviceGetProcessUtilization", e)),
        };
        tracing::trace!(gpu = %self.uuid, samples = samples.len(), "per-process samples read");
        let (fresh, last_seen) = fresh_process_utilization(&samples, self.process_last_seen_us);
        self.process_last_seen_us = last_seen;
        self.check_own_work(&fresh);
        Ok(fresh)
    }

    /// Re-checks own-PID candidates against a read of samples and our load.
    fn check_own_work(&mut self, fresh: &[ProcessSample]) {
        let Some(window_start) = fresh
            .iter()
            .map(|s| s.timestamp_us)
            .min()
            .map(|t| t.saturating_sub(duration_us(self.sample_period())))
        else {
            return;
        };
        if !self.own.has_candidates() {
            return;
        }
        let working: Vec<u32> = fresh
            .iter()
            .filter(|s| s.sm_util > 0)
            .map(|s| s.pid)
            .collect();
        let (idle, busy) = self.own_load.throughout(window_start);
        let dropped = self.own.recheck_work(&working, idle, busy);
        for pid in dropped {
            tracing::warn!(gpu = %self.uuid, pid,
                "a PID that appeared with our context ran kernels at odds with ours: not ours, counted as foreign");
        }
    }

    /// Device memory in use, or `None` where it cannot be read (logged once).
    fn used_memory(&mut self) -> Result<Option<u64>, ProbeError> {
        if !self.memory_readable {
            return Ok(None);
        }
        match self.device.memory_info() {
            Ok(memory) => Ok(Some(memory.used)),
            Err(e) if classify(&e) == ErrorKind::Unsupported => {
                tracing::warn!(gpu = %self.uuid, error = %e,
                    "cannot read device memory: processes outside our PID namespace are seen only by their work");
                self.memory_readable = false;
                Ok(None)
            }
            Err(e) => Err(ProbeError::nvml("nvmlDeviceGetMemoryInfo", e)),
        }
    }

    /// GPM's SM utilization (the share of SMs with a warp resident, which sees kernel
    /// width; NVML's utilization does not) between the previous GPM sample and one
    /// taken now. `None` on the first call and when the previous sample is under
    /// 100 ms old (GPM's refresh): call it again later.
    ///
    /// # Errors
    /// [`ProbeError::GpmUnsupported`] without GPM (before Hopper, vGPU); NVML errors
    /// otherwise, e.g. `NoPermission` in unprivileged containers (unsupported).
    pub fn sm_activity(&mut self) -> Result<Option<Utilization>, ProbeError> {
        if !self.gpm_supported()? {
            return Err(ProbeError::GpmUnsupported {
                uuid: self.uuid.clone(),
            });
        }
        if let Some((_, taken)) = &self.gpm_previous
            && taken.elapsed() < GPM_MIN_INTERVAL
        {
            return Ok(None);
        }
        let taken = Instant::now();
        let sample = self
            .device
            .gpm_sample()
            .map_err(|e| ProbeError::nvml("nvmlGpmSampleGet", e))?;
        let activity = self
            .gpm_previous
            .take()
            .map(|(previous, _)| sm_util_between(self.nvml, &previous, &sample));
        self.gpm_previous = Some((sample, taken));
        activity.transpose()
    }

    /// Device memory held by our own processes, bytes (for metrics): 0 when none of
    /// them is listed (no context, as after `release_context`); `None` when they are
    /// listed without a size (the driver does not say, e.g. in some containers).
    ///
    /// # Errors
    /// A classified NVML error.
    pub fn own_memory_bytes(&self) -> Result<Option<u64>, ProbeError> {
        let mut try_mps = self.try_mps;
        let list = compute_processes(&self.device, &mut try_mps)?;
        Ok(own_memory(&list, &self.own))
    }

    /// Board power draw, watts.
    ///
    /// # Errors
    /// A classified NVML error (unsupported on boards without a power sensor).
    pub fn power_watts(&self) -> Result<f64, ProbeError> {
        self.device
            .power_usage()
            .map(milliwatts_to_watts)
            .map_err(|e| ProbeError::nvml("nvmlDeviceGetPowerUsage", e))
    }

    fn gpm_supported(&mut self) -> Result<bool, ProbeError> {
        if let Some(supported) = self.gpm_supported {
            return Ok(supported);
        }
        let supported = match self.device.gpm_support() {
            Ok(supported) => supported,
            Err(e) if classify(&e) == ErrorKind::Unsupported => false,
            Err(e) => return Err(ProbeError::nvml("nvmlGpmQueryDeviceSupport", e)),
        };
        self.gpm_supported = Some(supported);
        Ok(supported)
    }

    /// Reads the sample timestamps again to learn the period and phase (see
    /// [`crate::sample_timing`]); `entered` is when the caller's `now` was current.
    fn resync(&mut self, now: Time, entered: Instant) -> Result<(), ProbeError> {
        let last_seen = self.timing.last_seen_us();
        match self.device.samples(Sampling::GpuUtilization, last_seen) {
            Ok(samples) => {
                let wall_now_us = wall_clock_us();
                let at = now + entered.elapsed();
                let stamps: Vec<u64> = samples.iter().map(|s| s.timestamp).collect();
                self.timing.learn(&stamps, wall_now_us, at);
                tracing::debug!(
                    gpu = %self.uuid,
                    samples = stamps.len(),
                    period_ms = self.timing.period().as_secs_f64() * 1e3,
                    phase_known = self.timing.phase_known(),
                    "utilization sample timing resynced"
                );
            }
            // Nothing newer than `last_seen`: the GPU is idle and reads 0 %.
            Err(NvmlError::NotFound) => self.timing.nothing_new(now),
            Err(e) => match classify(&e) {
                ErrorKind::Unsupported => {
                    tracing::info!(gpu = %self.uuid, error = %e,
                        "no utilization sample timestamps; polling every 200 ms");
                    self.timing.samples_unsupported();
                }
                ErrorKind::Lost => return Err(ProbeError::nvml("nvmlDeviceGetSamples", e)),
                ErrorKind::Transient => {
                    tracing::debug!(gpu = %self.uuid, error = %e, "sample timestamps unavailable");
                    self.timing.nothing_new(now);
                }
            },
        }
        Ok(())
    }

    /// Whether `pid` is the MPS server, by name (once per PID). A PID whose name
    /// NVML cannot resolve (a host PID seen from a container) counts as a workload.
    /// The process name, looked up once per PID (NVML cannot resolve host PIDs from
    /// inside a container: then `None`).
    fn name_of(&mut self, pid: u32) -> Option<String> {
        if let Some(known) = self.names.get(&pid) {
            return known.clone();
        }
        let name = self.nvml.process_name(pid);
        self.names.insert(pid, name.clone());
        name
    }
}

impl Probe for NvmlProbe {
    type Error = ProbeError;

    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, ProbeError> {
        let entered = Instant::now();
        if self.timing.resync_due(now) {
            self.resync(now, entered)?;
        }
        if !self.timing.read_due(now) {
            return Ok(None);
        }
        let rates = self
            .device
            .utilization_rates()
            .map_err(|e| ProbeError::nvml("nvmlDeviceGetUtilizationRates", e))?;
        self.timing.mark_read(now);
        Ok(Some(Utilization::saturating_from_fraction(
            f64::from(rates.gpu) / 100.0,
        )))
    }

    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, ProbeError> {
        if self.own.needs_work_checks() && self.next_own_check.is_none_or(|due| now >= due) {
            // Several candidates for our own PID: their samples tell them apart.
            self.next_own_check = Some(now + OWN_CHECK_EVERY);
            let fresh = self.process_samples()?;
            for s in fresh.iter().filter(|s| s.sm_util > 0) {
                if !self.pending_active.contains(&s.pid)
                    && self.pending_active.len() < PENDING_ACTIVE_MAX
                {
                    self.pending_active.push(s.pid);
                }
            }
        }
        // A bare count will not do in the namespace view (the sizes must be this read's)
        // nor with own-PID candidates (their sizes are checked at every read).
        if self.view.list_complete() && !self.own.has_candidates() && self.quiet.may_skip() {
            // One NVML call instead of two (the list itself is a count query and a fill).
            let count = self
                .device
                .running_compute_processes_count()
                .map_err(|e| ProbeError::nvml("nvmlDeviceGetComputeRunningProcesses", e))?;
            if self.quiet.unchanged(count) {
                // Usually empty: no allocation then.
                return Ok(self.last_foreign.clone());
            }
        }
        let mut list = running_processes(&self.device)?;
        tracing::trace!(gpu = %self.uuid, listed = list.len(), "full process list read");
        let listed = list.len();
        for pid in self.own.recheck_list(&list) {
            tracing::warn!(gpu = %self.uuid, pid,
                "a PID that appeared with our context changed its memory: not ours, counted as foreign");
        }
        // MPS clients are listed apart, and only exist while an MPS server is on the
        // GPU: ask for them only when the list may hold one (a server, or a process
        // whose name NVML cannot resolve). Usually only our own context is listed, so
        // this saves one of the three NVML calls of every tick.
        let mut may_hold_server = false;
        for p in &list {
            if !self.own.contains(p.pid) {
                may_hold_server |= self.name_of(p.pid).is_none_or(|n| is_mps_server_name(&n));
            }
        }
        if may_hold_server {
            add_mps_clients(&self.device, &mut list, &mut self.try_mps)?;
        }
        self.names
            .retain(|pid, _| list.iter().any(|p| p.pid == *pid));
        self.listed_memory = (
            list.iter().map(|p| p.used_memory_bytes).sum(),
            u32::try_from(list.len()).unwrap_or(u32::MAX),
        );
        // Usually empty: no allocation on the tick path.
        let mut foreign = Vec::new();
        for mut process in list {
            if self.own.contains(process.pid) {
                continue;
            }
            process.name = self.name_of(process.pid);
            if !process.name.as_deref().is_some_and(is_mps_server_name) {
                foreign.push(process);
            }
        }
        self.quiet
            .full_read(listed, !may_hold_server, foreign.is_empty());
        self.last_foreign.clone_from(&foreign);
        Ok(foreign)
    }

    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, ProbeError> {
        // Over a millisecond a call (docs/benchmarks.md#hardware-tests-run-b): at most
        // once per ACTIVITY_EVERY.
        if self.next_activity_read.is_some_and(|due| now < due) {
            return Ok(None);
        }
        self.next_activity_read = Some(now + self.sample_period().max(ACTIVITY_EVERY));
        let samples = self.process_samples()?;
        let mut active = std::mem::take(&mut self.pending_active);
        for s in samples.iter().filter(|s| s.sm_util > 0) {
            if !active.contains(&s.pid) {
                active.push(s.pid);
            }
        }
        active.retain(|&pid| !self.own.contains(pid));
        Ok(Some(active))
    }

    fn unlisted(&mut self, now: Time) -> Result<Unlisted, ProbeError> {
        if self.view.list_complete() {
            return Ok(Unlisted::ListComplete);
        }
        let reading = self
            .used_memory()?
            .map(|used| memory_reading(used, self.listed_memory, &self.own));
        Ok(self.memory.observe(now, reading))
    }

    fn note_load(&mut self, _now: Time, load: Load) {
        let busy = !load.is_idle();
        if self.own_load.since_us.is_none() || busy != self.own_load.busy {
            self.own_load = OwnLoad {
                busy,
                since_us: Some(wall_clock_us()),
            };
        }
    }
}

impl OwnLoad {
    /// Whether we ran nothing, and whether we filled, for the whole time since
    /// `window_start_us` (a stop leaves a burst running for up to [`STOP_TAIL_US`]).
    fn throughout(self, window_start_us: u64) -> (bool, bool) {
        match self.since_us {
            Some(since) if self.busy => (false, since <= window_start_us),
            Some(since) => (since + STOP_TAIL_US <= window_start_us, false),
            None => (false, false),
        }
    }
}

/// Device memory `used_bytes` against the last full list's sizes and entries
/// (`listed`): with nothing of ours listed, our context's size from its creation counts
/// as listed while device memory can hold it (the probe cannot see whether our context
/// is held or released).
fn memory_reading(used_bytes: u64, listed: (Option<u64>, u32), own: &OwnProcess) -> MemoryReading {
    let (listed_bytes, contexts) = listed;
    let own_unlisted = match own.context_bytes {
        Some(bytes) if own.pids.is_empty() && used_bytes >= bytes => bytes,
        _ => 0,
    };
    MemoryReading {
        used_bytes,
        listed_bytes: listed_bytes.map(|b| b + own_unlisted),
        listed_contexts: contexts,
    }
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Full process-list reads at least this often (in reads) even while the count is
/// unchanged and only our own processes were listed, as a backstop for the one change
/// a count cannot see: one of our contexts leaving in the same tick as a newcomer
/// arrives.
const FULL_READ_EVERY: u32 = 10;

/// The same backstop while others are listed (holders of a context), tighter: a
/// holder leaving as a newcomer is listed, between two reads, is seen within this many
/// reads (200 ms at the default 50 ms tick; a newcomer's first kernel came sooner than
/// that after its listing, docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes,
/// but its device-file open starts reads every few milliseconds,
/// each a count that the newcomer changes unless a holder left in those milliseconds).
const FULL_READ_BESIDE: u32 = 4;

/// Whether a process query can be a bare count. The full list is two NVML calls, a
/// count and a fill, which cost three driver round trips to the GPU's firmware
/// (`GET_PIDS` twice and `GET_PID_INFO`, tens of microseconds of CPU each from a cold
/// thread:
/// docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host,
/// "Where the loop thread's CPU goes"); the count is one. An unchanged count
/// means nobody came (or, rarely, one left as another came: hence the backstop), and
/// the last full read's foreign processes still stand. Not while the list may hold an
/// MPS server: its clients are listed apart and not counted. Pure bookkeeping, no NVML.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct QuietList {
    /// The count of the last full read, when a count can stand in for it, and whether
    /// that read held only our own processes.
    listed: Option<(u32, bool)>,
    /// Count-only reads since the last full read.
    skipped: u32,
}

impl QuietList {
    /// Whether a count may replace the full read this time.
    fn may_skip(&self) -> bool {
        match self.listed {
            Some((_, true)) => self.skipped < FULL_READ_EVERY,
            Some((_, false)) => self.skipped < FULL_READ_BESIDE,
            None => false,
        }
    }

    /// After a count: true when it matches (skip the full read this time).
    fn unchanged(&mut self, count: u32) -> bool {
        let same = self.listed.is_some_and(|(listed, _)| listed == count);
        self.skipped += u32::from(same);
        same
    }

    /// After a full read of `len` processes: `countable` when a count covers them all
    /// (no MPS server listed), `only_own` when none was foreign.
    fn full_read(&mut self, len: usize, countable: bool, only_own: bool) {
        self.skipped = 0;
        self.listed = countable.then(|| (u32::try_from(len).unwrap_or(u32::MAX), only_own));
    }
}

/// GPM's SM utilization between two samples, oldest first.
fn sm_util_between(
    nvml: Nvml,
    older: &GpmSample<'static>,
    newer: &GpmSample<'static>,
) -> Result<Utilization, ProbeError> {
    let error = |e| ProbeError::nvml("nvmlGpmMetricsGet", e);
    let results =
        nvml_wrapper::gpm::gpm_metrics_get(nvml.raw(), older, newer, &[GpmMetricId::SmUtil])
            .map_err(error)?;
    let sm_util = results
        .into_iter()
        .next()
        .unwrap_or(Err(NvmlError::Unknown))
        .map_err(error)?;
    Ok(Utilization::saturating_from_fraction(sm_util.value / 100.0))
}

/// Whether a process name (a path or a bare name) is the MPS server's.
fn is_mps_server_name(name: &str) -> bool {
    name.rsplit('/').next() == Some(MPS_SERVER)
}

/// Wall-clock microseconds since the Unix epoch, NVML's sample timestamp clock.
fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// The latest per-process sample of one PID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessSample {
    pub(crate) pid: u32,
    /// SM utilization, percent.
    pub(crate) sm_util: u32,
    /// When NVML recorded it (wall-clock microseconds): the end of its window.
    pub(crate) timestamp_us: u64,
}

/// The per-process samples worth believing, as nvtop does: only those newer than
/// `last_seen_us` (some drivers return old ones again) with `sm_util <= 100` (some
/// report garbage above), the latest per PID, sorted by PID; and the newest timestamp
/// seen, for the next query.
pub(crate) fn fresh_process_utilization(
    samples: &[ProcessUtilizationSample],
    last_seen_us: u64,
) -> (Vec<ProcessSample>, u64) {
    let mut latest: HashMap<u32, &ProcessUtilizationSample> = HashMap::new();
    let mut newest = last_seen_us;
    for sample in samples.iter().filter(|s| s.timestamp > last_seen_us) {
        newest = newest.max(sample.timestamp);
        if sample.sm_util > 100 {
            continue;
        }
        let entry = latest.entry(sample.pid).or_insert(sample);
        if sample.timestamp > entry.timestamp {
            *entry = sample;
        }
    }
    let mut fresh: Vec<ProcessSample> = latest
        .values()
        .map(|s| ProcessSample {
            pid: s.pid,
            sm_util: s.sm_util,
            timestamp_us: s.timestamp,
        })
        .collect();
    fresh.sort_unstable_by_key(|s| s.pid);
    (fresh, newest)
}

/// The memory of `own`'s entries in `list`: 0 when none is listed, `None` when they are
/// listed without a size.
fn own_memory(list: &[ProcessInfo], own: &OwnProcess) -> Option<u64> {
    let mut ours = list.iter().filter(|p| own.contains(p.pid)).peekable();
    if ours.peek().is_none() {
        return Some(0);
    }
    ours.filter_map(|p| p.used_memory_bytes)
        .reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(fresh: &[ProcessSample]) -> Vec<(u32, u32)> {
        fresh.iter().map(|s| (s.pid, s.sm_util)).collect()
    }

    fn sample(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn our_memory_is_zero_when_we_are_not_listed_and_unknown_without_a_size() {
        let process = |pid, bytes| ProcessInfo {
            pid,
            used_memory_bytes: bytes,
            name: None,
            mps_client: false,
        };
        let own = OwnProcess::pid(7);
        let mib = |n: u64| n << 20;
        assert_eq!(own_memory(&[], &own), Some(0));
        assert_eq!(own_memory(&[process(9, Some(mib(600)))], &own), Some(0));
        assert_eq!(
            own_memory(
                &[process(7, Some(mib(254))), process(9, Some(mib(600)))],
                &own
            ),
            Some(mib(254))
        );
        assert_eq!(own_memory(&[process(7, None)], &own), None);
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn device_memory_is_read_against_the_listed_sizes_and_our_context() {
        // Listed under our own PID: the list's sizes are all there is.
        let listed = memory_reading(262 * MIB, (Some(254 * MIB), 1), &OwnProcess::pid(2));
        assert_eq!(listed.unexplained(), Some(0));
        // Nothing of ours listed: our context's 262 MiB counts while memory holds it...
        let before = crate::Snapshot {
            processes: Vec::new(),
            used_bytes: Some(0),
        };
        let after = crate::Snapshot {
            used_bytes: Some(262 * MIB),
            ..before.clone()
        };
        let unlisted_us = crate::identify_own_context(&before, &after, 2);
        assert_eq!(unlisted_us.context_bytes, Some(262 * MIB));
        let held = memory_reading(262 * MIB, (Some(0), 0), &unlisted_us);
        assert_eq!(held.unexplained(), Some(0));
        // ... and not once device memory cannot hold it (our context released).
        let released = memory_reading(0, (Some(0), 0), &unlisted_us);
        assert_eq!(released.unexplained(), Some(0));
        // No sizes: unknown.
        assert_eq!(
            memory_reading(262 * MIB, (None, 1), &OwnProcess::pid(2)).unexplained(),
            None
        );
    }

    #[test]
    fn our_load_is_known_for_whole_sample_windows() {
        let idle = OwnLoad {
            busy: false,
            since_us: Some(1_000_000),
        };
        // Idle from 1 s: a window from 1.05 s may still hold our last burst.
        assert_eq!(idle.throughout(1_050_000), (false, false));
        assert_eq!(idle.throughout(1_100_000), (true, false));
        let busy = OwnLoad {
            busy: true,
            since_us: Some(1_000_000),
        };
        assert_eq!(busy.throughout(999_999), (false, false));
        assert_eq!(busy.throughout(1_000_000), (false, true));
        assert_eq!(OwnLoad::default().throughout(5), (false, false));
    }

    #[test]
    fn stale_samples_are_dropped_and_the_latest_per_process_kept() {
        let samples = [
            sample(7, 100, 90), // older than last seen: stale
            sample(7, 300, 40),
            sample(7, 500, 45),
            sample(9, 400, 10),
        ];
        let (fresh, newest) = fresh_process_utilization(&samples, 200);
        assert_eq!(pairs(&fresh), vec![(7, 45), (9, 10)]);
        assert_eq!(fresh[0].timestamp_us, 500);
        assert_eq!(newest, 500);
    }

    #[test]
    fn readings_above_a_hundred_percent_are_ignored_but_advance_the_clock() {
        let samples = [sample(3, 600, 4_294_967), sample(4, 550, 100)];
        let (fresh, newest) = fresh_process_utilization(&samples, 0);
        assert_eq!(pairs(&fresh), vec![(4, 100)]);
        assert_eq!(newest, 600);
    }

    #[test]
    fn nothing_new_keeps_the_last_seen_timestamp() {
        let (fresh, newest) = fresh_process_utilization(&[sample(1, 50, 5)], 80);
        assert!(fresh.is_empty());
        assert_eq!(newest, 80);
    }

    #[test]
    fn a_bare_count_stands_in_for_the_list_with_a_full_read_every_few() {
        let mut q = QuietList::default();
        assert!(!q.may_skip(), "nothing known yet");
        q.full_read(1, true, true);
        // Only ours listed: ten reads on a count, then a full read again.
        for _ in 0..FULL_READ_EVERY {
            assert!(q.may_skip());
            assert!(q.unchanged(1));
        }
        assert!(!q.may_skip());
        q.full_read(1, true, true);
        assert!(q.may_skip());
        // A newcomer changes the count: full read, which finds it.
        assert!(!q.unchanged(2));
        q.full_read(2, true, false);
        // Beside it (a holder), counts too, with a full read every FULL_READ_BESIDE.
        for _ in 0..FULL_READ_BESIDE {
            assert!(q.may_skip());
            assert!(q.unchanged(2));
        }
        assert!(!q.may_skip());
        q.full_read(2, true, false);
        // Another one: the count changes, a full read.
        assert!(q.may_skip() && !q.unchanged(3));
        // With an MPS server listed its clients are not counted: never a count.
        q.full_read(2, false, false);
        assert!(!q.may_skip());
        // It left: back to counting.
        q.full_read(1, true, true);
        assert!(q.may_skip() && q.unchanged(1));
    }

    #[test]
    fn the_mps_server_is_known_by_its_name_or_path() {
        assert!(is_mps_server_name("nvidia-cuda-mps-server"));
        assert!(is_mps_server_name("/usr/bin/nvidia-cuda-mps-server"));
        assert!(!is_mps_server_name("nvidia-cuda-mps-control"));
        assert!(!is_mps_server_name("python3"));
    }

    #[test]
    fn a_probe_can_move_to_its_gpu_thread_and_the_session_is_shared() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<NvmlProbe>();
        send_sync::<Nvml>();
    }

    #[test]
    fn the_wall_clock_is_in_microseconds_since_1970() {
        // 2020-01-01 in microseconds; NVML timestamps are on this scale.
        assert!(wall_clock_us() > 1_577_836_800_000_000);
    }
}
