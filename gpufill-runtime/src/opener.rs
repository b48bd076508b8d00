//! How an [`crate::Agent`] opens its GPUs ([`Opener`]): the real GPUs' opener
//! ([`NvmlCuda`]), and the simulated GPU's ([`SimOpener`], over `gpufill-sim`'s model).

mod sim;

pub use sim::{SimOpener, with_launch_settings};

use std::time::Duration;

use gpufill_core::{LoadSource, Loop, Probe, Time};
use gpufill_nvml::{MetricProbe, Nvml};

use crate::open::{OpenError, RealLoad, RealLoop, open_gpu};
use crate::select::Gpu;
use crate::settings::Settings;
use crate::steering::DeviceReadings;

/// How an agent opens its GPUs and reads them for snapshots.
pub trait Opener: Send + Sync + 'static {
    /// The probe of an opened GPU.
    type Probe: Probe + Send + 'static;
    /// The load source of an opened GPU.
    type Load: LoadSource + Send + 'static;
    /// Why a GPU could not be opened.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Opens `gpu` for filling with `settings` at `now` on the agent's clock (when its
    /// worker starts, and again after a loss); `mps` says whether an MPS daemon runs.
    ///
    /// # Errors
    /// Why it could not be opened.
    fn open(
        &self,
        gpu: &Gpu,
        settings: &Settings,
        mps: bool,
        now: Time,
    ) -> Result<Loop<Self::Probe, Self::Load>, Self::Error>;

    /// The slowly changing readings of a snapshot (our own GPU memory, board power),
    /// asked at most once a second. The default knows none.
    fn readings(&self, probe: &Self::Probe) -> DeviceReadings {
        let _ = probe;
        (None, None)
    }

    /// Whether the loop should watch the NVIDIA device files for newcomers between
    /// ticks (inotify on the device files that every CUDA process opens). The default does not: a simulated GPU has none.
    fn watches_devices(&self) -> bool {
        false
    }

    /// Waits, up to `limit`, until nothing of ours is queued or running on the GPU;
    /// true when that is so. Called once, after the last step. The default has nothing
    /// to wait for.
    fn quiesce(&self, fill: &Loop<Self::Probe, Self::Load>, limit: Duration) -> bool {
        let _ = (fill, limit);
        true
    }
}

/// The real GPUs: CUDA for the load, NVML for the probe ([`open_gpu`]).
#[derive(Clone, Copy, Debug)]
pub struct NvmlCuda {
    /// The NVML session.
    pub nvml: Nvml,
}

impl Opener for NvmlCuda {
    type Probe = MetricProbe;
    type Load = RealLoad;
    type Error = OpenError;

    fn open(
        &self,
        gpu: &Gpu,
        settings: &Settings,
        mps: bool,
        _now: Time,
    ) -> Result<RealLoop, OpenError> {
        open_gpu(self.nvml, gpu, settings, mps)
    }

    fn watches_devices(&self) -> bool {
        true
    }

    fn readings(&self, probe: &MetricProbe) -> DeviceReadings {
        // NVML's process list and power reading cost CPU: asked once a second at most.
        let memory = probe.own_memory_bytes().ok().flatten();
        (memory, probe.power_watts().ok())
    }

    fn quiesce(&self, fill: &RealLoop, limit: Duration) -> bool {
        fill.load_source()
            .current()
            .is_none_or(|load| load.quiesce(limit))
    }
}
