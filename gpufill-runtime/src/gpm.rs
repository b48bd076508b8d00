//! The `sm` metric's check: every selected GPU must give GPM samples before any worker
//! starts, so a GPU that cannot is a clear error up front.

use gpufill_nvml::{GpmRefusal, Nvml, ProbeError, check_gpm, gpm_refusal};

use crate::select::Gpu;

/// GPM cannot be read on a GPU, as `metric = "sm"` needs.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub struct GpmError {
    gpu: String,
    refusal: Option<GpmRefusal>,
    source: ProbeError,
}

impl GpmError {
    /// GPM failing on `gpu` with `source`.
    pub fn new(gpu: &Gpu, source: ProbeError) -> Self {
        GpmError {
            gpu: format!("GPU {} ({}, {})", gpu.index, gpu.name, gpu.uuid),
            refusal: gpm_refusal(&source),
            source,
        }
    }

    /// A GPU without GPM is a settings error: like a `gpus` entry naming a GPU that is
    /// not there, the settings ask for what this hardware cannot do, and only changing
    /// them helps. A refused permission, or any other NVML failure, is not: the same
    /// settings work once the environment allows it.
    pub fn is_settings_error(&self) -> bool {
        self.refusal == Some(GpmRefusal::NoGpm)
    }

    fn message(&self) -> String {
        let (gpu, error) = (&self.gpu, &self.source);
        match self.refusal {
            Some(GpmRefusal::NoGpm) => format!(
                "metric: {gpu} has no GPM (GPU Performance Monitoring): metric = \"sm\" needs \
                 Hopper or later; use metric = \"util\" on this GPU"
            ),
            Some(GpmRefusal::NoPermission) => format!(
                "metric = \"sm\": NVML refused GPM on {gpu}: no permission ({error}); run \
                 gpufill with the rights to read GPU performance counters (e.g. as root, or a \
                 container with profiling allowed), or use metric = \"util\""
            ),
            None => format!("metric = \"sm\": cannot read GPM on {gpu}: {error}"),
        }
    }
}

/// Checks that every GPU gives GPM samples.
///
/// # Errors
/// The first GPU's [`GpmError`].
pub fn check_all(nvml: Nvml, gpus: &[Gpu]) -> Result<(), GpmError> {
    for gpu in gpus {
        check_gpm(nvml, &gpu.uuid).map_err(|e| GpmError::new(gpu, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::error::NvmlError;

    fn gpu() -> Gpu {
        Gpu {
            index: 1,
            uuid: "GPU-abc".into(),
            name: "Tesla V100-SXM2-16GB".into(),
            ordinal: 1,
            sm_count: 80,
            max_resident_blocks: 80 * 32,
        }
    }

    #[test]
    fn a_gpu_without_gpm_is_a_settings_error_naming_the_gpu_and_hopper() {
        let e = GpmError::new(
            &gpu(),
            ProbeError::GpmUnsupported {
                uuid: "GPU-abc".into(),
            },
        );
        assert!(e.is_settings_error(), "{e}");
        let message = e.to_string();
        assert!(
            message.contains("GPU 1 (Tesla V100-SXM2-16GB, GPU-abc)"),
            "{message}"
        );
        assert!(
            message.contains("metric = \"sm\" needs Hopper or later"),
            "{message}"
        );
    }

    #[test]
    fn refused_permission_is_a_runtime_error_that_says_so() {
        let e = GpmError::new(
            &gpu(),
            ProbeError::nvml("nvmlGpmSampleGet", NvmlError::NoPermission),
        );
        assert!(!e.is_settings_error(), "{e}");
        assert!(e.to_string().contains("no permission"), "{e}");
    }
}
