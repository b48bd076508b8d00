//! [`Settings::validate`]: every key against its rule, then the relations between keys,
//! each refused with the key to change and why ([`SettingsError`]).

use super::defaults::Settings;
use super::rules::range_reason;

/// Why settings were refused: the config key (`load.period_ms`) and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SettingsError {
    /// The key in gpufill's TOML file that is wrong; for a relation between keys, the
    /// one to change.
    pub key: &'static str,
    /// What is wrong, e.g. `must be between 1 and 1000, got 0`.
    pub reason: String,
    /// For a relation between two keys, the other key and what is wrong as seen from
    /// it: a caller that knows which of the two the user set (a file naming only
    /// `tick_ms`, a flag) names that one instead.
    pub other: Option<(&'static str, String)>,
}

impl SettingsError {
    /// This error as seen from `key`: itself, or its other side when `key` is the
    /// other key of the relation.
    pub fn blaming(self, key: &str) -> SettingsError {
        match self.other {
            Some((other, reason)) if other == key => SettingsError {
                key: other,
                reason,
                other: Some((self.key, self.reason)),
            },
            other => SettingsError { other, ..self },
        }
    }
}

impl Settings {
    /// Checks every key against its rule, then the relations between keys.
    ///
    /// # Errors
    /// [`SettingsError`] naming the key and the reason, for the first problem found.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if let Some((key, reason)) = self.first_problem() {
            return Err(SettingsError {
                key,
                reason,
                other: None,
            });
        }
        match self.relation_problem() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// The relations between keys, each with the reason as seen from either key.
    fn relation_problem(&self) -> Option<SettingsError> {
        let (load, probe) = (&self.load, &self.probe);
        let period_us = load.period_ms.saturating_mul(1000);
        for (key, kernel_us) in [
            ("load.beside_kernel_us", load.beside_kernel_us),
            ("load.mps_kernel_us", load.mps_kernel_us),
        ] {
            if kernel_us > period_us {
                return Some(SettingsError {
                    key,
                    reason: format!(
                        "must not exceed load.period_ms ({} ms = {period_us} us), got {kernel_us}",
                        load.period_ms
                    ),
                    other: Some((
                        "load.period_ms",
                        format!(
                            "must be at least {key} ({kernel_us} us), got {}",
                            load.period_ms
                        ),
                    )),
                });
            }
        }
        let (period, tick) = (load.period_ms, self.tick_ms);
        // Bursts start only at ticks (the launcher runs in the loop's thread, right after
        // the process check), so a period that is not a whole number of ticks cannot be kept.
        if tick > 0 && period % tick != 0 {
            return Some(SettingsError {
                key: "load.period_ms",
                reason: format!(
                    "must be a multiple of tick_ms ({tick} ms): bursts start only at ticks, got {period}"
                ),
                other: Some((
                    "tick_ms",
                    format!(
                        "must divide load.period_ms ({period} ms): bursts start only at ticks, got {tick}"
                    ),
                )),
            });
        }
        if probe.retry_max_s < probe.retry_initial_s {
            return Some(SettingsError {
                key: "probe.retry_max_s",
                reason: range_reason(probe.retry_initial_s, 86400.0, probe.retry_max_s),
                other: Some((
                    "probe.retry_initial_s",
                    format!(
                        "must be at most probe.retry_max_s ({}), got {}",
                        probe.retry_max_s, probe.retry_initial_s
                    ),
                )),
            });
        }
        None
    }
}
