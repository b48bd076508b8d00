//! [`MetricProbe`]: the [`Probe`] that reads either NVML's utilization (the share of time
//! busy) or, for the `sm` metric, GPM's SM utilization (the share of SMs busy).
//!
//! GPM (GPU Performance Monitoring, Hopper and later) gives a metric between two
//! samples taken at least 100 ms apart (nvml.h, `nvmlGpmMetricsGet`). The probe takes
//! one every [`GPM_PERIOD`] (200 ms): four of the launcher's 50 ms bursts in each
//! window, so the reading does not jitter with the phase, and two NVML calls per 200 ms
//! cost no noticeable CPU. The loop still reads the process list every tick, right
//! before each burst, so yielding is exactly as fast as with the `util` metric.

use std::time::Duration;

use gpufill_core::{Load, Probe, ProcessInfo, Time, Unlisted, Utilization};
use nvml_wrapper::error::NvmlError;

use crate::error::{ProbeError, classify};
use crate::probe::NvmlProbe;
use crate::session::Nvml;

/// Time between GPM samples: each SM reading covers this window.
pub const GPM_PERIOD: Duration = Duration::from_millis(200);

/// Why a GPU cannot give the `sm` metric, for the user-facing message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpmRefusal {
    /// The GPU has no GPM (before Hopper, or a vGPU): a hardware limit.
    NoGpm,
    /// NVML refused GPM for lack of permission (unprivileged containers, profiling
    /// restricted to admins): an environment limit.
    NoPermission,
}

/// The refusal `error` stands for, if it is one.
pub fn gpm_refusal(error: &ProbeError) -> Option<GpmRefusal> {
    match error {
        ProbeError::GpmUnsupported { .. } => Some(GpmRefusal::NoGpm),
        ProbeError::Nvml {
            error: NvmlError::NoPermission,
            ..
        } => Some(GpmRefusal::NoPermission),
        ProbeError::Nvml {
            error: NvmlError::NotSupported,
            call: "nvmlGpmQueryDeviceSupport" | "nvmlGpmSampleGet",
        } => Some(GpmRefusal::NoGpm),
        _ => None,
    }
}

/// Checks that GPU `uuid` gives GPM samples: that it supports GPM and that NVML lets
/// this process take a sample. Cheap; no context needed.
///
/// # Errors
/// [`ProbeError::GpmUnsupported`] without GPM; a `NoPermission` NVML error when
/// refused (see [`gpm_refusal`]); other classified NVML errors.
pub fn check_gpm(nvml: Nvml, uuid: &str) -> Result<(), ProbeError> {
    let device = nvml.device(uuid)?;
    let supported = match device.gpm_support() {
        Ok(supported) => supported,
        Err(e) if classify(&e) == gpufill_core::ErrorKind::Unsupported => {
            if matches!(e, NvmlError::NoPermission) {
                return Err(ProbeError::nvml("nvmlGpmQueryDeviceSupport", e));
            }
            false
        }
        Err(e) => return Err(ProbeError::nvml("nvmlGpmQueryDeviceSupport", e)),
    };
    if !supported {
        return Err(ProbeError::GpmUnsupported { uuid: uuid.into() });
    }
    device
        .gpm_sample()
        .map(drop)
        .map_err(|e| ProbeError::nvml("nvmlGpmSampleGet", e))
}

/// When the next GPM reading is due: pure, so it is tested without a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpmCadence {
    next: Option<Time>,
}

impl GpmCadence {
    /// Whether a reading is due at `now`; if so, the next one is due [`GPM_PERIOD`] later.
    pub fn take(&mut self, now: Time) -> bool {
        if self.next.is_some_and(|due| now < due) {
            return false;
        }
        self.next = Some(now + GPM_PERIOD);
        true
    }
}

/// The probe `run` fills with: an [`NvmlProbe`] whose utilization reading is either
/// NVML's (the `util` metric) or GPM's SM utilization every [`GPM_PERIOD`] (the `sm`
/// metric). Process lists come from the wrapped probe either way, and it derefs to it, so
/// its other readings (power, own memory) stay at hand.
#[derive(Debug)]
pub struct MetricProbe {
    inner: NvmlProbe,
    /// `Some` for the `sm` metric.
    gpm: Option<GpmCadence>,
}

impl MetricProbe {
    /// Reads NVML's utilization, as `inner` does.
    pub fn utilization(inner: NvmlProbe) -> Self {
        MetricProbe { inner, gpm: None }
    }

    /// Reads GPM's SM utilization. Takes the first GPM sample now, which the first
    /// reading compares against.
    ///
    /// # Errors
    /// As [`NvmlProbe::sm_activity`]: no GPM, no permission, or an NVML error.
    pub fn sm_activity(mut inner: NvmlProbe) -> Result<Self, ProbeError> {
        inner.sm_activity()?;
        Ok(MetricProbe {
            inner,
            gpm: Some(GpmCadence::default()),
        })
    }

    /// Whether the reading is GPM's SM utilization.
    pub fn reads_sm_activity(&self) -> bool {
        self.gpm.is_some()
    }
}

impl std::ops::Deref for MetricProbe {
    type Target = NvmlProbe;

    fn deref(&self) -> &NvmlProbe {
        &self.inner
    }
}

impl Probe for MetricProbe {
    type Error = ProbeError;

    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, ProbeError> {
        match &mut self.gpm {
            None => self.inner.utilization(now),
            Some(cadence) => {
                if cadence.take(now) {
                    self.inner.sm_activity()
                } else {
                    Ok(None)
                }
            }
        }
    }

    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, ProbeError> {
        self.inner.foreign_processes(now)
    }

    fn active_processes(&mut self, now: Time) -> Result<Option<Vec<u32>>, ProbeError> {
        self.inner.active_processes(now)
    }

    fn unlisted(&mut self, now: Time) -> Result<Unlisted, ProbeError> {
        self.inner.unlisted(now)
    }

    fn note_load(&mut self, now: Time, load: Load) {
        self.inner.note_load(now, load);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpm_is_read_once_per_period_whatever_the_tick() {
        let mut c = GpmCadence::default();
        let reads: Vec<u64> = (0..100)
            .map(|i| i * 10)
            .filter(|&ms| c.take(Time::from_millis(ms)))
            .collect();
        assert_eq!(reads, vec![0, 200, 400, 600, 800]);
    }

    #[test]
    fn a_late_tick_reads_at_once_and_restarts_the_period() {
        let mut c = GpmCadence::default();
        assert!(c.take(Time::from_millis(0)));
        assert!(c.take(Time::from_millis(450)));
        assert!(!c.take(Time::from_millis(640)));
        assert!(c.take(Time::from_millis(650)));
    }

    #[test]
    fn refusals_are_told_apart_for_the_message() {
        let uuid = "GPU-1".to_string();
        assert_eq!(
            gpm_refusal(&ProbeError::GpmUnsupported { uuid }),
            Some(GpmRefusal::NoGpm)
        );
        assert_eq!(
            gpm_refusal(&ProbeError::nvml(
                "nvmlGpmSampleGet",
                NvmlError::NoPermission
            )),
            Some(GpmRefusal::NoPermission)
        );
        assert_eq!(
            gpm_refusal(&ProbeError::nvml(
                "nvmlGpmQueryDeviceSupport",
                NvmlError::NotSupported
            )),
            Some(GpmRefusal::NoGpm)
        );
        assert_eq!(
            gpm_refusal(&ProbeError::nvml("nvmlGpmSampleGet", NvmlError::Timeout)),
            None
        );
    }
}
