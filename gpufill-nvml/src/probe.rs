//! [`NvmlProbe`]: the [`Probe`] of one GPU, plus per-process, GPM and power readings.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use gpufill_core::{ErrorKind, Probe, ProcessInfo, Time, Utilization};
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
    gpm_supported: Option<bool>,
    gpm_previous: Option<(GpmSample<'static>, Instant)>,
}

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
            gpm_supported: None,
            gpm_previous: None,
        })
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
        let samples = match self
            .device
            .process_utilization_stats(self.process_last_seen_us)
        {
            Ok(samples) => samples,
            Err(NvmlError::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(ProbeError::nvml("nvmlDeviceGetProcessUtilization", e)),
        };
        let (fresh, last_seen) = fresh_process_utilization(&samples, self.process_last_seen_us);
        self.process_last_seen_us = last_seen;
        Ok(fresh)
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

    fn foreign_processes(&mut self, _now: Time) -> Result<Vec<ProcessInfo>, ProbeError> {
        if self.quiet.may_skip() {
            // One NVML call instead of two (the list itself is a count query and a fill).
            let count = self
                .device
                .running_compute_processes_count()
                .map_err(|e| ProbeError::nvml("nvmlDeviceGetComputeRunningProcesses", e))?;
            if self.quiet.unchanged(count) {
                return Ok(Vec::new());
            }
        }
        let mut list = running_processes(&self.device)?;
        let listed = list.len();
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
            .full_read(listed, foreign.is_empty() && !may_hold_server);
        Ok(foreign)
    }

    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, ProbeError> {
        // About 1.4 ms a call: at most once per sample period.
        if self.next_activity_read.is_some_and(|due| now < due) {
            return Ok(None);
        }
        self.next_activity_read = Some(now + self.sample_period());
        let samples = self.process_utilization()?;
        Ok(Some(
            samples
                .into_iter()
                .filter(|&(pid, sm)| sm > 0 && !self.own.contains(pid))
                .map(|(pid, _)| pid)
                .collect(),
        ))
    }
}

/// Full process-list reads at least this often (in ticks) even while the count is
/// unchanged, as a backstop for the one change a count cannot see: one of our
/// contexts leaving in the same tick as a newcomer arrives.
const FULL_READ_EVERY: u32 = 10;

/// Whether the per-tick process query can be a bare count: when the last full read
/// listed only our own processes, an unchanged count means nobody came (nobody left
/// either, and ours stay while we hold a context). Pure bookkeeping, no NVML.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct QuietList {
    /// The count of the last full read, when it held only our own processes.
    only_own: Option<u32>,
    /// Count-only reads since the last full read.
    skipped: u32,
}

impl QuietList {
    /// Whether a count may replace the full read this tick.
    fn may_skip(&self) -> bool {
        self.only_own.is_some() && self.skipped < FULL_READ_EVERY
    }

    /// After a count: true when it matches (skip the full read this tick).
    fn unchanged(&mut self, count: u32) -> bool {
        let same = self.only_own == Some(count);
        self.skipped += u32::from(same);
        same
    }

    /// After a full read of `len` processes, of which none foreign when `only_own`.
    fn full_read(&mut self, len: usize, only_own: bool) {
        self.skipped = 0;
        self.only_own = only_own.then(|| u32::try_from(len).unwrap_or(u32::MAX));
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

/// The per-process samples worth believing, as nvtop does: only those newer than
/// `last_seen_us` (some drivers return old ones again) with `sm_util <= 100` (some
/// report garbage above), the latest per PID, as `(pid, sm %)` sorted by PID; and the
/// newest timestamp seen, for the next query.
pub(crate) fn fresh_process_utilization(
    samples: &[ProcessUtilizationSample],
    last_seen_us: u64,
) -> (Vec<(u32, u32)>, u64) {
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
    let mut fresh: Vec<(u32, u32)> = latest.values().map(|s| (s.pid, s.sm_util)).collect();
    fresh.sort_unstable();
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

    #[test]
    fn stale_samples_are_dropped_and_the_latest_per_process_kept() {
        let samples = [
            sample(7, 100, 90), // older than last seen: stale
            sample(7, 300, 40),
            sample(7, 500, 45),
            sample(9, 400, 10),
        ];
        let (fresh, newest) = fresh_process_utilization(&samples, 200);
        assert_eq!(fresh, vec![(7, 45), (9, 10)]);
        assert_eq!(newest, 500);
    }

    #[test]
    fn readings_above_a_hundred_percent_are_ignored_but_advance_the_clock() {
        let samples = [sample(3, 600, 4_294_967), sample(4, 550, 100)];
        let (fresh, newest) = fresh_process_utilization(&samples, 0);
        assert_eq!(fresh, vec![(4, 100)]);
        assert_eq!(newest, 600);
    }

    #[test]
    fn nothing_new_keeps_the_last_seen_timestamp() {
        let (fresh, newest) = fresh_process_utilization(&[sample(1, 50, 5)], 80);
        assert!(fresh.is_empty());
        assert_eq!(newest, 80);
    }

    #[test]
    fn a_bare_count_stands_in_for_the_list_only_while_just_we_are_listed() {
        let mut q = QuietList::default();
        assert!(!q.may_skip(), "nothing known yet");
        q.full_read(1, true);
        // Nine ticks on a count, then a full read again.
        for _ in 0..FULL_READ_EVERY {
            assert!(q.may_skip());
            assert!(q.unchanged(1));
        }
        assert!(!q.may_skip());
        q.full_read(1, true);
        assert!(q.may_skip());
        // A newcomer changes the count: full read, which finds it; no skipping then.
        assert!(!q.unchanged(2));
        q.full_read(2, false);
        assert!(!q.may_skip());
        // It left: back to counting.
        q.full_read(1, true);
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
