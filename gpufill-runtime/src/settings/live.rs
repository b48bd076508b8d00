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

/// A [`RestartKey`] for the field at `path` (`load.period_ms`): its name is the path.
macro_rules! restart_key {
    ($($field:ident).+) => {
        (
            stringify!($($field).+),
            |a, b| a.$($field).+ != b.$($field).+,
            #[allow(clippy::clone_on_copy)]
            |o, n| n.$($field).+ = o.$($field).+.clone(),
        )
    };
}

/// The keys a running agent cannot change: they shape threads, the launcher or the
/// probe, which are set up once per GPU. Every other key takes effect at each worker's
/// next tick. (`metrics.listen`, the binary's own key, needs a restart too.)
pub const RESTART_KEYS: &[RestartKey] = &[
    restart_key!(gpus),
    restart_key!(tick_ms),
    restart_key!(load.period_ms),
    restart_key!(load.max_kernel_us),
    restart_key!(load.beside_kernel_us),
    restart_key!(load.mps_kernel_us),
    restart_key!(probe.retry_initial_s),
    restart_key!(probe.retry_max_s),
    restart_key!(metric),
    restart_key!(load.kernel),
];
