//! Which GPUs to fill: the selector from the config resolved against NVML's list.
//!
//! Pure over the list (a fake inventory in tests): GPUs with MIG enabled are skipped,
//! whether selected by "all" or by name, because NVML cannot measure a MIG GPU's
//! utilization (`nvmlDeviceGetUtilizationRates` is unsupported there) and gpufill
//! would fill blind; the caller logs one line for each.

use anyhow::anyhow;
use gpufill_nvml::GpuInfo;

use crate::UsageError;
use crate::config::{GpuId, GpuSelector};

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
/// [`UsageError`] when the selector names a GPU that is not in the list; a runtime
/// error when nothing is left to fill (every selected GPU has MIG enabled).
pub fn choose<'a>(gpus: &'a [GpuInfo], selector: &GpuSelector) -> anyhow::Result<Selection<'a>> {
    let selected: Vec<&GpuInfo> = match selector {
        GpuSelector::All => gpus.iter().collect(),
        GpuSelector::List(ids) => ids
            .iter()
            .map(|id| {
                gpus.iter().find(|g| matches(g, id)).ok_or_else(|| {
                    UsageError(anyhow!(
                        "gpus: no GPU {} on this machine ({} GPUs found)",
                        describe(id),
                        gpus.len()
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let (skipped_mig, chosen): (Vec<_>, Vec<_>) = selected.into_iter().partition(|g| g.mig_enabled);
    if chosen.is_empty() {
        return Err(anyhow!(
            "no GPU to fill: NVML lists {} GPUs, {} selected with MIG enabled (gpufill cannot measure MIG GPUs)",
            gpus.len(),
            skipped_mig.len()
        ));
    }
    Ok(Selection {
        chosen,
        skipped_mig,
    })
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
        assert!(e.downcast_ref::<UsageError>().is_none());
    }

    #[test]
    fn an_unknown_gpu_is_a_usage_error() {
        let gpus = [gpu(0, false)];
        let e = choose(&gpus, &GpuSelector::List(vec![GpuId::Index(7)])).unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some());
        assert!(e.to_string().contains("no GPU with index 7"), "{e}");
    }

    #[test]
    fn no_gpu_at_all_is_an_error() {
        assert!(choose(&[], &GpuSelector::All).is_err());
    }
}
