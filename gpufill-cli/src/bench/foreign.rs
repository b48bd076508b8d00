//! `gpufill bench-foreign` (hidden): the foreign process of the bench's yield test,
//! the runtime's [`gpufill_runtime::bench::foreign_load`] for the time it is given.

use std::time::Duration;

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
    gpufill_runtime::bench::foreign_load(ordinal, Duration::from_secs_f64(seconds))?;
    Ok(())
}
