//! The yield test's foreign process: what the process that a [`super::SpawnForeign`]
//! starts runs (the `gpufill` binary: itself as `gpufill bench-foreign`). It opens a
//! CUDA context through gpufill-cuda, as any CUDA job would, and runs short spin
//! kernels at a low duty until its time is up.

use std::time::{Duration, Instant};

use gpufill_core::{Duty, Load, LoadSource, Time, Width};
use gpufill_cuda::{CudaError, CudaLoad, LauncherSettings};

/// Share of time the foreign process keeps the GPU busy.
const FOREIGN_DUTY: f64 = 0.3;

/// Why the foreign load failed.
#[derive(Debug, thiserror::Error)]
pub enum ForeignError {
    /// No CUDA context on the device.
    #[error("cannot open a CUDA context")]
    Open(#[source] CudaError),
    /// The first kernels could not be set going.
    #[error("cannot start the kernels")]
    Start(#[source] CudaError),
    /// A launch, or going idle, failed.
    #[error("the kernels failed")]
    Kernels(#[source] CudaError),
    /// Its time was up before any kernel was launched.
    #[error("no kernel ran")]
    NoKernel,
}

/// Runs the foreign load on CUDA device `ordinal` for `run`, then leaves it idle.
///
/// # Errors
/// The failed CUDA call ([`ForeignError`]); no kernel having run.
pub fn foreign_load(ordinal: usize, run: Duration) -> Result<(), ForeignError> {
    let mut load =
        CudaLoad::open(ordinal, LauncherSettings::default()).map_err(ForeignError::Open)?;
    let busy = Load {
        duty: Duty::clamped(FOREIGN_DUTY),
        width: Width::ONE_WARP,
    };
    load.set_load(Time::ZERO, busy)
        .map_err(ForeignError::Start)?;
    // The launcher launches from this thread: call it once a period until time is up.
    let period = load.settings().period;
    let until = Instant::now() + run;
    while Instant::now() < until {
        load.launch_due(Time::ZERO).map_err(ForeignError::Kernels)?;
        std::thread::sleep(period);
    }
    load.set_load(Time::ZERO, Load::IDLE)
        .map_err(ForeignError::Kernels)?;
    load.quiesce(Duration::from_secs(1));
    if load.stats().kernels_launched == 0 {
        return Err(ForeignError::NoKernel);
    }
    Ok(())
}
