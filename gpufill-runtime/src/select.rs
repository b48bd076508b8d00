//! Which GPUs to fill: the selector resolved against NVML's list, then matched to
//! CUDA devices by UUID.
//!
//! [`choose`] is pure over the list (a fake inventory in tests): GPUs with MIG enabled
//! are skipped, whether selected by "all" or by name, because NVML cannot measure a MIG
//! GPU's utilization (`nvmlDeviceGetUtilizationRates` is unsupported there) and gpufill
//! would fill blind; [`select`] logs one line for each.

use gpufill_nvml::{GpuInfo, Nvml, ProbeError};
use tracing::warn;

use crate::gpus::{GpuId, GpuSelector};

/// A GPU chosen to fill, known to both NVML and CUDA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// NVML index (what `nvidia-smi` shows).
    pub index: u32,
    /// UUID, which matches NVML and CUDA devices.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// CUDA ordinal (may differ from the NVML index).
    pub ordinal: usize,
    /// Streaming multiprocessors, from the CUDA device attribute: the widest kernel
    /// the `sm` metric uses.
    pub sm_count: u32,
    /// One-warp blocks the GPU holds at once (SMs x blocks per SM); 0 when unknown.
    pub max_resident_blocks: u32,
}

impl Gpu {
    /// Whether a kernel of `width_blocks` one-warp blocks runs in one wave here. A wider
    /// grid runs in waves, each as long as the kernel, which multiplies every burst and
    /// with it the time a newcomer can find our work queued.
    ///
    /// # Errors
    /// A message naming the GPU and its limit.
    pub fn check_width(&self, width_blocks: u32) -> Result<(), String> {
        if self.max_resident_blocks == 0 || width_blocks <= self.max_resident_blocks {
            return Ok(());
        }
        Err(format!(
            "{width_blocks} blocks do not fit at once on GPU {} ({}, {} resident blocks at \
             most): the grid would run in waves, multiplying each burst; use at most {}",
            self.index, self.name, self.max_resident_blocks, self.max_resident_blocks
        ))
    }
}

/// Why no GPUs could be selected.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The selector names a GPU that is not there: the settings are wrong.
    #[error("gpus: no GPU {} on this machine ({found} GPUs found)", describe(id))]
    NoSuchGpu {
        /// The GPU asked for.
        id: GpuId,
        /// How many GPUs NVML lists.
        found: usize,
    },
    /// Every selected GPU has MIG enabled (or there are none).
    #[error(
        "no GPU to fill: NVML lists {listed} GPUs, {mig} selected with MIG enabled (gpufill cannot measure MIG GPUs)"
    )]
    NothingToFill {
        /// How many GPUs NVML lists.
        listed: usize,
        /// How many of the selected have MIG enabled.
        mig: usize,
    },
    /// NVML lists the GPU but CUDA does not.
    #[error("GPU {index} ({uuid}) is not visible to CUDA (check CUDA_VISIBLE_DEVICES)")]
    NotVisibleToCuda {
        /// NVML index.
        index: u32,
        /// UUID.
        uuid: String,
    },
    /// NVML could not list the GPUs.
    #[error("cannot list GPUs through NVML: {0}")]
    Nvml(#[from] ProbeError),
    /// CUDA could not list the devices.
    #[error("cannot list GPUs through CUDA: {0}")]
    Cuda(#[from] gpufill_cuda::CudaError),
}

impl SelectError {
    /// Whether the settings are at fault (a GPU named that is not there), rather than
    /// the machine: a binary exits with its usage status for these.
    pub fn is_settings_error(&self) -> bool {
        matches!(self, SelectError::NoSuchGpu { .. })
    }
}

/// The outcome of [`choose`].
#[derive(Debug, PartialEq)]
pub struct Selection<'a> {
    /// The GPUs to fill, in the order selected.
    pub chosen: Vec<&'a GpuInfo>,
    /// Selected GPUs skipped because MIG is enabled on them.
    pub skipped_mig: Vec<&'a GpuInfo>,
}

/// Resolves `selector` against `gpus`.
///
/// # Errors
/// [`SelectError::NoSuchGpu`] when the selector names a GPU that is not in the list;
/// [`SelectError::NothingToFill`] when every selected GPU has MIG enabled.
pub fn choose<'a>(
    gpus: &'a [GpuInfo],
    selector: &GpuSelector,
) -> Result<Selection<'a>, SelectError> {
    let selected: Vec<&GpuInfo> = match selector {
        GpuSelector::All => gpus.iter().collect(),
        GpuSelector::List(ids) => ids
            .iter()
            .map(|id| {
                gpus.iter()
                    .find(|g| matches(g, id))
                    .ok_or_else(|| SelectError::NoSuchGpu {
                        id: id.clone(),
                        found: gpus.len(),
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let (skipped_mig, chosen): (Vec<_>, Vec<_>) = selected.into_iter().partition(|g| g.mig_enabled);
    if chosen.is_empty() {
        return Err(SelectError::NothingToFill {
            listed: gpus.len(),
            mig: skipped_mig.len(),
        });
    }
    Ok(Selection {
        chosen,
        skipped_mig,
    })
}

/// Lists the GPUs through NVML, resolves `selector` ([`choose`], logging each MIG GPU
/// skipped), and finds each chosen GPU's CUDA ordinal and SM count by UUID.
///
/// # Errors
/// As [`choose`], and [`SelectError::NotVisibleToCuda`], [`SelectError::Nvml`],
/// [`SelectError::Cuda`] when the drivers cannot list or match the GPUs.
pub fn select(nvml: Nvml, selector: &GpuSelector) -> Result<Vec<Gpu>, SelectError> {
    select_listed(&nvml.gpus()?, selector)
}

/// [`select`] from GPUs NVML has just listed (`gpus`), for a caller that needs the list
/// for more (start-up reads it once).
pub(crate) fn select_listed(
    gpus: &[GpuInfo],
    selector: &GpuSelector,
) -> Result<Vec<Gpu>, SelectError> {
    let cuda = gpufill_cuda::devices()?;
    let selection = choose(gpus, selector)?;
    for g in &selection.skipped_mig {
        warn!(gpu = g.index, uuid = %g.uuid, "skipping: MIG is enabled, NVML cannot measure its utilization");
    }
    selection
        .chosen
        .into_iter()
        .map(|g| {
            let device = cuda
                .iter()
                .find(|c| c.uuid.eq_ignore_ascii_case(&g.uuid))
                .ok_or_else(|| SelectError::NotVisibleToCuda {
                    index: g.index,
                    uuid: g.uuid.clone(),
                })?;
            Ok(Gpu {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                ordinal: device.ordinal,
                sm_count: device.sm_count,
                max_resident_blocks: device.sm_count.saturating_mul(device.max_blocks_per_sm),
            })
        })
        .collect()
}

fn matches(g: &GpuInfo, id: &GpuId) -> bool {
    match id {
        GpuId::Index(i) => g.index == *i,
        GpuId::Uuid(u) => g.uuid.eq_ignore_ascii_case(u),
    }
}

fn describe(id: &GpuId) -> String {
    match id {
        GpuId::Index(i) => format!("with index {i}"),
        GpuId::Uuid(u) => format!("with UUID {u}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, mig: bool) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index:04}"),
            name: "NVIDIA H200".into(),
            memory_used_bytes: 0,
            memory_total_bytes: 141 << 30,
            utilization_percent: (!mig).then_some(0),
            power_watts: None,
            mig_enabled: mig,
            processes: Vec::new(),
        }
    }

    fn indices(list: &[&GpuInfo]) -> Vec<u32> {
        list.iter().map(|g| g.index).collect()
    }

    #[test]
    fn all_selects_every_gpu_except_those_with_mig() {
        let gpus = [gpu(0, false), gpu(1, true), gpu(2, false), gpu(3, true)];
        let s = choose(&gpus, &GpuSelector::All).unwrap();
        assert_eq!(indices(&s.chosen), [0, 2]);
        assert_eq!(indices(&s.skipped_mig), [1, 3]);
    }

    #[test]
    fn a_named_mig_gpu_is_skipped_too() {
        let gpus = [gpu(0, false), gpu(1, true)];
        let ids = GpuSelector::List(vec![GpuId::Uuid("gpu-0001".into()), GpuId::Index(0)]);
        let s = choose(&gpus, &ids).unwrap();
        assert_eq!(indices(&s.chosen), [0]);
        assert_eq!(indices(&s.skipped_mig), [1]);
    }

    #[test]
    fn only_mig_gpus_leave_nothing_to_fill() {
        let gpus = [gpu(0, true), gpu(1, true)];
        let e = choose(&gpus, &GpuSelector::All).unwrap_err();
        assert!(e.to_string().contains("2 selected with MIG enabled"), "{e}");
        assert!(!e.is_settings_error());
    }

    #[test]
    fn an_unknown_gpu_is_a_usage_error() {
        let gpus = [gpu(0, false)];
        let e = choose(&gpus, &GpuSelector::List(vec![GpuId::Index(7)])).unwrap_err();
        assert!(e.is_settings_error());
        assert!(e.to_string().contains("no GPU with index 7"), "{e}");
    }

    #[test]
    fn a_grid_that_would_run_in_waves_is_refused_and_an_unknown_limit_is_not() {
        let mut h100 = Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            name: "NVIDIA H100".into(),
            ordinal: 0,
            sm_count: 132,
            max_resident_blocks: 132 * 32,
        };
        assert!(h100.check_width(4224).is_ok());
        let e = h100.check_width(4225).unwrap_err();
        assert!(
            e.contains("4225 blocks do not fit") && e.contains("use at most 4224"),
            "{e}"
        );
        h100.max_resident_blocks = 0;
        assert!(h100.check_width(65535).is_ok());
    }

    #[test]
    fn no_gpu_at_all_is_an_error() {
        assert!(choose(&[], &GpuSelector::All).is_err());
    }
}
