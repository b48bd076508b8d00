//! [`ReloadStatus`]: a reload's final outcome as Prometheus series ([`SERIES`]), as
//! Prometheus serves its own (`prometheus_config_last_reload_*`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::prometheus::{Kind, Series, number};

/// The reload series, described where their values are kept; rendered by
/// [`ReloadStatus::render`], not by [`crate::prometheus::render`], and listed in the
/// docs after [`crate::prometheus::series`].
pub const SERIES: [Series; 2] = [
    Series::elsewhere(
        "gpufill_config_last_reload_successful",
        Kind::Gauge,
        "1 if the last load of the config file (at start or on SIGHUP) succeeded, 0 if it was refused (the old settings stay).",
        "As Prometheus's own `prometheus_config_last_reload_successful`.",
    ),
    Series::elsewhere(
        "gpufill_config_last_reload_success_timestamp_seconds",
        Kind::Gauge,
        "When the config file was last loaded successfully (at start or on SIGHUP), Unix time in seconds.",
        "",
    ),
];

/// The outcome of the config's loads: at start, and at each reload. A caller records
/// each final outcome only: a file refused, or new settings once their receiver (the
/// agent) took them ([`super::Reload::commit`]) or refused them; a reload still waiting
/// for its file, or proposed and not yet taken, changes nothing.
#[derive(Debug)]
pub struct ReloadStatus {
    refused: AtomicBool,
    /// Unix time of the last successful load, in milliseconds; 0: none yet.
    success_ms: AtomicU64,
}

impl Default for ReloadStatus {
    fn default() -> Self {
        ReloadStatus::new()
    }
}

impl ReloadStatus {
    /// No load recorded yet: successful, with no timestamp.
    pub const fn new() -> Self {
        ReloadStatus {
            refused: AtomicBool::new(false),
            success_ms: AtomicU64::new(0),
        }
    }

    /// The config was loaded and is in force, at `at`.
    pub fn succeeded(&self, at: SystemTime) {
        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        self.success_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.refused.store(false, Ordering::Relaxed);
    }

    /// A reload was refused: the old settings stay.
    pub fn refused(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// The two series as Prometheus text (the timestamp only once a load succeeded).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let ok = if self.refused.load(Ordering::Relaxed) {
            0
        } else {
            1
        };
        let ms = self.success_ms.load(Ordering::Relaxed);
        let values = [
            Some(ok.to_string()),
            (ms > 0).then(|| number(ms as f64 / 1000.0)),
        ];
        for (series, value) in SERIES.iter().zip(values) {
            series.header(&mut out);
            if let Some(value) = value {
                let _ = writeln!(out, "{} {value}", series.name);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reloads_read_as_prometheus_reads_its_own() {
        let status = ReloadStatus::new();
        let text = status.render();
        assert!(
            text.contains("\ngpufill_config_last_reload_successful 1\n"),
            "{text}"
        );
        assert!(!text.contains("\ngpufill_config_last_reload_success_timestamp_seconds "));
        status.succeeded(UNIX_EPOCH + Duration::from_millis(1_700_000_000_250));
        status.refused();
        let text = status.render();
        assert!(
            text.contains("\ngpufill_config_last_reload_successful 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngpufill_config_last_reload_success_timestamp_seconds 1700000000.25\n"),
            "{text}"
        );
        status.succeeded(UNIX_EPOCH + Duration::from_secs(1_700_000_100));
        assert!(status.render().contains("_successful 1\n"));
    }
}
