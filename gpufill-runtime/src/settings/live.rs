//! What a running agent takes from new settings: every key at each worker's next tick
//! but those that shape threads, the launcher or the probe ([`RESTART_KEYS`]), which
//! keep their old values until a restart.

use super::defaults::Settings;

impl Settings {
    /// New settings for a running agent: `new` with the values of the keys that need a
    /// restart ([`RESTART_KEYS`]) taken from `self`, and the names of those that differed.
    pub fn live_update(&self, mut new: Settings) -> (Settings, Vec<&'static str>) {
        let mut kept = Vec::new();
        for (key, differs, keep) in RESTART_KEYS {
            if differs(self, &new) {
                keep(self, &mut new);
                kept.push(*key);
            }
        }
        (new, kept)
    }
}

/// A key that needs a restart: its name, whether two settings differ in it, and how to
/// copy the old value into the new settings.
type RestartKey = (
    &'static str,
    fn(&Settings, &Settings) -> bool,
    fn(&Settings, &mut Settings),
);

/// The keys a running agent cannot change: they shape threads, the launcher or the
/// probe, which are set up once per GPU. Every other key takes effect at each worker's
/// next tick. (`metrics.listen`, the binary's own key, needs a restart too.)
pub const RESTART_KEYS: &[RestartKey] = &[
    (
        "gpus",
        |a, b| a.gpus != b.gpus,
        |o, n| n.gpus = o.gpus.clone(),
    ),
    (
        "tick_ms",
        |a, b| a.tick_ms != b.tick_ms,
        |o, n| n.tick_ms = o.tick_ms,
    ),
    (
        "load.period_ms",
        |a, b| a.load.period_ms != b.load.period_ms,
        |o, n| n.load.period_ms = o.load.period_ms,
    ),
    (
        "load.max_kernel_us",
        |a, b| a.load.max_kernel_us != b.load.max_kernel_us,
        |o, n| n.load.max_kernel_us = o.load.max_kernel_us,
    ),
    (
        "load.beside_kernel_us",
        |a, b| a.load.beside_kernel_us != b.load.beside_kernel_us,
        |o, n| n.load.beside_kernel_us = o.load.beside_kernel_us,
    ),
    (
        "probe.retry_initial_s",
        |a, b| a.probe.retry_initial_s != b.probe.retry_initial_s,
        |o, n| n.probe.retry_initial_s = o.probe.retry_initial_s,
    ),
    (
        "probe.retry_max_s",
        |a, b| a.probe.retry_max_s != b.probe.retry_max_s,
        |o, n| n.probe.retry_max_s = o.probe.retry_max_s,
    ),
    (
        "metric",
        |a, b| a.metric != b.metric,
        |o, n| n.metric = o.metric,
    ),
    (
        "load.kernel",
        |a, b| a.load.kernel != b.load.kernel,
        |o, n| n.load.kernel = o.load.kernel,
    ),
];
