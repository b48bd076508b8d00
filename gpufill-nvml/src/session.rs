//! [`Nvml`]: the process's NVML session, device listing for `gpufill status`, and
//! compute-process lists.

use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

use gpufill_core::{DeviceError, ErrorKind, ProcessInfo};
use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use crate::error::{ProbeError, classify};
use crate::own::Snapshot;

/// The one NVML session of this process, never shut down (see [`Nvml`]).
static SESSION: OnceLock<nvml_wrapper::Nvml> = OnceLock::new();
/// Serializes first initializations, so that two threads do not both load NVML.
static INIT: Mutex<()> = Mutex::new(());

/// `NVML_DEVICE_MIG_ENABLE` (nvml.h), not re-exported by nvml-wrapper.
const NVML_DEVICE_MIG_ENABLE: u32 = 1;

/// The longest process name asked of NVML (it truncates longer ones).
const PROCESS_NAME_LEN: usize = 1024;

/// A handle on the process's NVML session. `Copy`: pass it around freely.
///
/// The session lives until the process exits (`nvmlShutdown` is never called; the
/// driver cleans up after a process like after any other). That makes it `'static`,
/// so an [`crate::NvmlProbe`] can keep its device handle and its previous GPM
/// sample, both of which borrow the session in nvml-wrapper, without `unsafe`.
/// NVML's own initialization is reference-counted and process-wide anyway.
#[derive(Clone, Copy)]
pub struct Nvml {
    inner: &'static nvml_wrapper::Nvml,
}

impl fmt::Debug for Nvml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Nvml")
    }
}

/// One GPU as `gpufill status` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    /// NVML's index (may differ from the CUDA ordinal: match devices by `uuid`).
    pub index: u32,
    /// The GPU's UUID, `GPU-...`.
    pub uuid: String,
    /// The product name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Device memory in use, bytes.
    pub memory_used_bytes: u64,
    /// Device memory installed, bytes.
    pub memory_total_bytes: u64,
    /// NVML's GPU utilization in percent (`None` where unsupported, e.g. under MIG).
    pub utilization_percent: Option<u32>,
    /// Board power draw in watts, when the board reports it.
    pub power_watts: Option<f64>,
    /// Whether MIG is enabled (gpufill cannot measure such a GPU).
    pub mig_enabled: bool,
    /// The compute processes on it (MPS clients included).
    pub processes: Vec<ProcessEntry>,
}

/// A compute process on a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessEntry {
    /// Its host PID.
    pub pid: u32,
    /// Device memory it holds, bytes, when the driver says.
    pub used_memory_bytes: Option<u64>,
    /// Its name, when NVML can resolve the PID (not for host PIDs seen from a container).
    pub name: Option<String>,
    /// Whether NVML lists it as a client of an MPS server: its kernels share the SMs
    /// with the other clients'; a process that is not one time-slices with them.
    pub mps_client: bool,
}

impl Nvml {
    /// Opens the process's NVML session (or returns the one already open).
    ///
    /// # Errors
    /// [`ErrorKind::Unsupported`] errors without a driver: "libnvidia-ml.so.1 not
    /// found: install the NVIDIA driver" or "NVIDIA driver is not loaded". Never panics.
    pub fn init() -> Result<Self, ProbeError> {
        if let Some(inner) = SESSION.get() {
            return Ok(Nvml { inner });
        }
        let _guard = INIT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(inner) = SESSION.get() {
            return Ok(Nvml { inner });
        }
        let session = nvml_wrapper::Nvml::init().map_err(ProbeError::from_init)?;
        Ok(Nvml {
            inner: SESSION.get_or_init(|| session),
        })
    }

    /// nvml-wrapper's session, for calls this crate does not wrap.
    pub fn raw(&self) -> &'static nvml_wrapper::Nvml {
        self.inner
    }

    /// The driver version, e.g. `580.159.04`.
    ///
    /// # Errors
    /// A classified NVML error.
    pub fn driver_version(&self) -> Result<String, ProbeError> {
        self.inner
            .sys_driver_version()
            .map_err(|e| ProbeError::nvml("nvmlSystemGetDriverVersion", e))
    }

    /// Every GPU NVML sees, in NVML index order.
    ///
    /// # Errors
    /// A classified NVML error for anything but the optional fields (utilization,
    /// power, process names), which are `None` when NVML cannot give them.
    pub fn gpus(&self) -> Result<Vec<GpuInfo>, ProbeError> {
        let count = self
            .inner
            .device_count()
            .map_err(|e| ProbeError::nvml("nvmlDeviceGetCount", e))?;
        (0..count)
            .map(|index| {
                let device = self
                    .inner
                    .device_by_index(index)
                    .map_err(|e| ProbeError::nvml("nvmlDeviceGetHandleByIndex", e))?;
                self.gpu_info(&device)
            })
            .collect()
    }

    /// The host PIDs of the compute processes (MPS clients included) on the GPU
    /// `uuid`, sorted: the snapshots for [`crate::identify_own`].
    ///
    /// # Errors
    /// [`ProbeError::NoSuchGpu`], or a classified NVML error.
    pub fn compute_pids(&self, uuid: &str) -> Result<Vec<u32>, ProbeError> {
        let device = self.device(uuid)?;
        let mut pids: Vec<u32> = compute_processes(&device, &mut true)?
            .iter()
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        Ok(pids)
    }

    /// The device's compute processes (MPS clients included) with their sizes, and its
    /// memory in use: the snapshots for [`crate::identify_own_context`], taken just
    /// before and just after our CUDA context is created.
    ///
    /// # Errors
    /// [`ProbeError::NoSuchGpu`], or a classified NVML error (memory that cannot be read
    /// is `None`, not an error).
    pub fn snapshot(&self, uuid: &str) -> Result<Snapshot, ProbeError> {
        let device = self.device(uuid)?;
        let mut processes = compute_processes(&device, &mut true)?;
        processes.sort_unstable_by_key(|p| p.pid);
        Ok(Snapshot {
            processes,
            used_bytes: device.memory_info().ok().map(|m| m.used),
        })
    }

    /// The device handle for `uuid`.
    pub(crate) fn device(&self, uuid: &str) -> Result<Device<'static>, ProbeError> {
        self.inner.device_by_uuid(uuid).map_err(|e| match e {
            NvmlError::NotFound | NvmlError::InvalidArg | NvmlError::NulError(_) => {
                ProbeError::NoSuchGpu { uuid: uuid.into() }
            }
            e => ProbeError::nvml("nvmlDeviceGetHandleByUUID", e),
        })
    }

    /// The process name of `pid`, or `None` where NVML cannot resolve it.
    pub(crate) fn process_name(&self, pid: u32) -> Option<String> {
        self.inner
            .sys_process_name(pid, PROCESS_NAME_LEN)
            .ok()
            .filter(|name| !name.is_empty())
    }

    fn gpu_info(&self, device: &Device<'static>) -> Result<GpuInfo, ProbeError> {
        let nvml = |call| move |e| ProbeError::nvml(call, e);
        let memory = device
            .memory_info()
            .map_err(nvml("nvmlDeviceGetMemoryInfo"))?;
        let processes = match compute_processes(device, &mut true) {
            Ok(list) => list,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                tracing::warn!(error = %e, "cannot list compute processes");
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        Ok(GpuInfo {
            index: device.index().map_err(nvml("nvmlDeviceGetIndex"))?,
            uuid: device.uuid().map_err(nvml("nvmlDeviceGetUUID"))?,
            name: device.name().map_err(nvml("nvmlDeviceGetName"))?,
            memory_used_bytes: memory.used,
            memory_total_bytes: memory.total,
            utilization_percent: device.utilization_rates().ok().map(|u| u.gpu),
            power_watts: device.power_usage().ok().map(milliwatts_to_watts),
            mig_enabled: mig_enabled(device)?,
            processes: processes
                .into_iter()
                .map(|p| ProcessEntry {
                    pid: p.pid,
                    used_memory_bytes: p.used_memory_bytes,
                    name: self.process_name(p.pid),
                    mps_client: p.mps_client,
                })
                .collect(),
        })
    }
}

/// Watts from NVML's milliwatts.
pub(crate) fn milliwatts_to_watts(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}

/// Whether MIG is enabled on `device`; `false` where the device has no MIG.
pub(crate) fn mig_enabled(device: &Device<'_>) -> Result<bool, ProbeError> {
    match device.mig_mode() {
        Ok(mode) => Ok(mode.current == NVML_DEVICE_MIG_ENABLE),
        Err(e) if classify(&e) == ErrorKind::Lost => {
            Err(ProbeError::nvml("nvmlDeviceGetMigMode", e))
        }
        Err(_) => Ok(false),
    }
}

/// The compute processes on `device`, MPS clients included while `try_mps` holds;
/// an MPS query that proves unsupported clears `try_mps` and is not made again.
pub(crate) fn compute_processes(
    device: &Device<'_>,
    try_mps: &mut bool,
) -> Result<Vec<ProcessInfo>, ProbeError> {
    let mut list = running_processes(device)?;
    add_mps_clients(device, &mut list, try_mps)?;
    Ok(list)
}

/// The compute processes NVML lists on `device` (an MPS server, not its clients).
pub(crate) fn running_processes(device: &Device<'_>) -> Result<Vec<ProcessInfo>, ProbeError> {
    Ok(device
        .running_compute_processes()
        .map_err(|e| ProbeError::nvml("nvmlDeviceGetComputeRunningProcesses", e))?
        .into_iter()
        .map(|p| ProcessInfo {
            pid: p.pid,
            used_memory_bytes: used_bytes(&p.used_gpu_memory),
            name: None,
            mps_client: false,
        })
        .collect())
}

/// Adds the MPS clients on `device` to `list` while `try_mps` holds; a query that
/// proves unsupported clears `try_mps`.
pub(crate) fn add_mps_clients(
    device: &Device<'_>,
    list: &mut Vec<ProcessInfo>,
    try_mps: &mut bool,
) -> Result<(), ProbeError> {
    if !*try_mps {
        return Ok(());
    }
    match device.mps_running_compute_processes() {
        Ok(clients) => merge_processes(
            list,
            clients.into_iter().map(|p| ProcessInfo {
                pid: p.pid,
                used_memory_bytes: used_bytes(&p.used_gpu_memory),
                name: None,
                mps_client: true,
            }),
        ),
        Err(e) if classify(&e) == ErrorKind::Unsupported => {
            tracing::debug!(error = %e, "no MPS process list on this device");
            *try_mps = false;
        }
        Err(e) => {
            return Err(ProbeError::nvml(
                "nvmlDeviceGetMPSComputeRunningProcesses",
                e,
            ));
        }
    }
    Ok(())
}

fn used_bytes(used: &UsedGpuMemory) -> Option<u64> {
    match used {
        UsedGpuMemory::Used(bytes) => Some(*bytes),
        UsedGpuMemory::Unavailable => None,
    }
}

/// Adds the processes of `more` whose PID `list` lacks; one listed in both is an MPS
/// client if either list says so.
pub(crate) fn merge_processes(
    list: &mut Vec<ProcessInfo>,
    more: impl IntoIterator<Item = ProcessInfo>,
) {
    for process in more {
        match list.iter_mut().find(|p| p.pid == process.pid) {
            Some(known) => known.mps_client |= process.mps_client,
            None => list.push(process),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, mib: u64) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_memory_bytes: Some(mib << 20),
            name: None,
            mps_client: false,
        }
    }

    #[test]
    fn mps_clients_already_listed_are_not_listed_twice() {
        let mut list = vec![process(1, 66), process(2, 254)];
        let client = |pid, mib| ProcessInfo {
            mps_client: true,
            ..process(pid, mib)
        };
        merge_processes(&mut list, [client(2, 254), client(3, 300)]);
        let pids: Vec<u32> = list.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![1, 2, 3]);
        let clients: Vec<bool> = list.iter().map(|p| p.mps_client).collect();
        assert_eq!(
            clients,
            vec![false, true, true],
            "the MPS list marks clients"
        );
    }

    #[test]
    fn power_comes_in_watts() {
        assert_eq!(milliwatts_to_watts(125_500), 125.5);
    }

    #[test]
    fn without_a_driver_init_fails_cleanly_as_unsupported() {
        // On a machine with a driver this just opens the session.
        if let Err(e) = Nvml::init() {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        }
    }
}
