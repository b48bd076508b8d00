//! The `sm` metric's checks and mappings for `gpufill run`: every selected GPU must give
//! GPM samples before any worker starts, so a GPU that cannot is a clear error up front.

use anyhow::anyhow;
use gpufill_cuda::SpinKernel;
use gpufill_nvml::{GpmRefusal, Nvml, ProbeError, check_gpm, gpm_refusal};

use crate::UsageError;
use crate::config::KernelChoice;
use crate::run::Target;

/// The launcher's kernel for `load.kernel`.
pub fn spin_kernel(choice: KernelChoice) -> SpinKernel {
    match choice {
        KernelChoice::Spin => SpinKernel::Spin,
        KernelChoice::Sleep => SpinKernel::Sleep,
    }
}

/// Checks that every target gives GPM samples.
///
/// # Errors
/// A GPU without GPM is a [`UsageError`] (exit 2): like a `gpus` entry naming a GPU
/// that is not there, the configuration asks for what this hardware cannot do, and only
/// changing it helps. A refused permission, or any other NVML failure, is a runtime
/// error (exit 1): the same configuration works once the environment allows it.
pub fn check_targets(nvml: Nvml, targets: &[Target]) -> anyhow::Result<()> {
    for target in targets {
        if let Err(e) = check_gpm(nvml, &target.uuid) {
            return Err(refusal_error(target, &e));
        }
    }
    Ok(())
}

/// The user-facing error for GPM failing on `target`.
pub fn refusal_error(target: &Target, error: &ProbeError) -> anyhow::Error {
    let gpu = format!("GPU {} ({}, {})", target.index, target.name, target.uuid);
    match gpm_refusal(error) {
        Some(GpmRefusal::NoGpm) => UsageError(anyhow!(
            "metric: {gpu} has no GPM (GPU Performance Monitoring): metric = \"sm\" needs \
             Hopper or later; use metric = \"util\" on this GPU"
        ))
        .into(),
        Some(GpmRefusal::NoPermission) => anyhow!(
            "metric = \"sm\": NVML refused GPM on {gpu}: no permission ({error}); run \
             gpufill with the rights to read GPU performance counters (e.g. as root, or a \
             container with profiling allowed), or use metric = \"util\""
        ),
        None => anyhow!("metric = \"sm\": cannot read GPM on {gpu}: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::error::NvmlError;

    fn target() -> Target {
        Target {
            index: 1,
            uuid: "GPU-abc".into(),
            name: "Tesla V100-SXM2-16GB".into(),
            ordinal: 1,
            sm_count: 80,
        }
    }

    #[test]
    fn a_gpu_without_gpm_is_a_usage_error_naming_the_gpu_and_hopper() {
        let e = refusal_error(
            &target(),
            &ProbeError::GpmUnsupported {
                uuid: "GPU-abc".into(),
            },
        );
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
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
        let e = refusal_error(
            &target(),
            &ProbeError::nvml("nvmlGpmSampleGet", NvmlError::NoPermission),
        );
        assert!(e.downcast_ref::<UsageError>().is_none(), "{e:#}");
        assert!(e.to_string().contains("no permission"), "{e}");
    }

    #[test]
    fn kernel_choices_map_onto_the_launcher_kernels() {
        assert_eq!(spin_kernel(KernelChoice::Spin).entry(), "spin");
        assert_eq!(spin_kernel(KernelChoice::Sleep).entry(), "spin_sleep");
    }
}
