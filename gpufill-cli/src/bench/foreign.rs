//! `gpufill bench-foreign` (hidden): the foreign process of the bench's yield test. It
//! opens a CUDA context through gpufill-cuda, as any CUDA job would, and runs short spin
//! kernels at a low duty until its time is up, then exits.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpufill_core::{Duty, Load, LoadSource, Time, Width};
use gpufill_cuda::{CudaLoad, LauncherSettings};

/// Share of time the foreign process keeps the GPU busy.
const FOREIGN_DUTY: f64 = 0.3;

/// Runs on CUDA device `ordinal` for `seconds`.
///
/// # Errors
/// A usage error for a bad duration; the failed CUDA call; no kernel having run.
pub fn run(ordinal: usize, seconds: f64) -> anyhow::Result<()> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 600.0) {
        return Err(crate::error::UsageError(anyhow::anyhow!(
            "--seconds must be between 0 and 600, got {seconds}"
        ))
        .into());
    }
    let mut load = CudaLoad::open(ordinal, LauncherSettings::default())
        .context("cannot open a CUDA context")?;
    let busy = Load {
        duty: Duty::clamped(FOREIGN_DUTY),
        width: Width::ONE_WARP,
    };
    load.set_load(Time::ZERO, busy)
        .context("cannot start the kernels")?;
    // The launcher launches from this thread: call it once a period until time is up.
    let period = load.settings().period;
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        load.launch_due(Time::ZERO).context("the kernels failed")?;
        std::thread::sleep(period);
    }
    load.set_load(Time::ZERO, Load::IDLE)
        .context("the kernels failed")?;
    load.quiesce(Duration::from_secs(1));
    if load.stats().kernels_launched == 0 {
        bail!("no kernel ran");
    }
    Ok(())
}
