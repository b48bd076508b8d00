//! Opening one GPU for filling: its CUDA context and launcher, its NVML probe, our own
//! process found in NVML's list, and the fill loop built from [`Settings`].

use gpufill_core::Reopening;
use gpufill_core::{Controller, FillLoop};
use gpufill_cuda::{CudaError, CudaLoad};
use gpufill_nvml::{MetricProbe, Nvml, NvmlProbe, ProbeError, identify_own_context};
use tracing::{info, warn};

use crate::gpm::GpmError;
use crate::select::Gpu;
use crate::settings::{Metric, Settings};

/// The message for a machine without the NVIDIA driver.
pub(crate) const NO_DRIVER: &str = "no NVIDIA driver: libcuda.so.1 was not found (install the NVIDIA driver; `gpufill simulate` runs without one)";

/// Why a GPU could not be opened for filling.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// libcuda is not there: the one missing-driver error of the runtime (the agent's
    /// start and every GPU's opening give this one).
    #[error("{NO_DRIVER}")]
    NoDriver,
    /// NVML failed while reading the process list or building the probe.
    #[error(transparent)]
    Nvml(#[from] ProbeError),
    /// The CUDA context or the launcher could not be made.
    #[error("cannot open the CUDA context: {0}")]
    Cuda(CudaError),
    /// `metric = "sm"` cannot read GPM on this GPU.
    #[error(transparent)]
    Gpm(#[from] GpmError),
    /// `load.width_blocks` is wider than this GPU holds at once.
    #[error("load.width_blocks: {0}")]
    Width(String),
}

impl From<CudaError> for OpenError {
    /// CUDA's own missing driver is the runtime's one [`OpenError::NoDriver`], with its
    /// message.
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::NoDriver => OpenError::NoDriver,
            e => OpenError::Cuda(e),
        }
    }
}

impl OpenError {
    /// Whether the settings are at fault (they ask for what this GPU cannot do), rather
    /// than the machine.
    pub fn is_settings_error(&self) -> bool {
        match self {
            OpenError::Gpm(e) => e.is_settings_error(),
            OpenError::Width(_) => true,
            _ => false,
        }
    }
}

/// The load source of a real GPU: the CUDA launcher, reopened on resume after a
/// context release.
pub type RealLoad = Reopening<CudaLoad, Box<dyn FnMut() -> Result<CudaLoad, CudaError> + Send>>;

/// The fill loop over one real GPU.
pub type RealLoop = FillLoop<MetricProbe, RealLoad, Box<dyn Controller + Send>>;

/// Opens `gpu`'s CUDA context and NVML probe and builds its fill loop from `settings`;
/// `mps` says whether an MPS control daemon runs ([`crate::mps::daemon_running`]).
///
/// # Errors
/// [`OpenError`]: no driver, NVML or CUDA failing, or GPM refused for `metric = "sm"`.
pub fn open_gpu(
    nvml: Nvml,
    gpu: &Gpu,
    settings: &Settings,
    mps: bool,
) -> Result<RealLoop, OpenError> {
    if !gpufill_cuda::driver_present() {
        return Err(OpenError::NoDriver);
    }
    if settings.metric == Metric::Util {
        gpu.check_width(settings.load.width_blocks)
            .map_err(OpenError::Width)?;
    }
    let launcher = settings.launcher_settings_under(mps);
    // Our own entry is our PID where NVML lists it (driver 580 translates PIDs into our
    // namespace); else the PIDs that appear with our context, re-checked while running.
    // Inside a PID namespace of our own the probe also reads device memory (issue 14).
    let view = gpufill_nvml::pid_view();
    let before = nvml.snapshot(&gpu.uuid)?;
    let load = CudaLoad::open(gpu.ordinal, launcher)?;
    let after = nvml.snapshot(&gpu.uuid)?;
    let own = identify_own_context(&before, &after, std::process::id());
    if own.ambiguous {
        warn!(pids = ?own.pids, "several processes appeared with our context; treating all as ours until their memory or work tells them apart");
    }
    let context_mib = own.context_bytes.map(|b| b >> 20);
    info!(name = %gpu.name, uuid = %gpu.uuid, own = ?own.pids, ?context_mib, pid_view = view.as_str(), "context ready");
    let probe = NvmlProbe::new(nvml, &gpu.uuid, own)?.with_pid_view(view);
    let probe = match settings.metric {
        Metric::Util => MetricProbe::utilization(probe),
        Metric::Sm => {
            info!(sm_count = gpu.sm_count, "holding GPM SM utilization");
            MetricProbe::sm_activity(probe).map_err(|e| GpmError::new(gpu, e))?
        }
    };
    // With yield.release_context the context is dropped while yielding and opened again
    // on resume; our host PID stays the same, so `own` stays right.
    let ordinal = gpu.ordinal;
    let reopen: Box<dyn FnMut() -> _ + Send> = Box::new(move || {
        info!("opening a new CUDA context");
        CudaLoad::open(ordinal, launcher)
    });
    Ok(FillLoop::build(
        probe,
        Reopening::new(load, reopen),
        &settings.loop_settings(gpu.sm_count, mps),
    ))
}
