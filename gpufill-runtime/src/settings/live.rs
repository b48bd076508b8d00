//! What a running agent takes from new settings: every key at each worker's next tick
//! but those whose line says `restart` ([`RESTART_KEYS`]): they shape threads, the
//! launcher or the probe, which are set up once per GPU, and keep their old values
//! until a restart. (`metrics.listen`, the binary's own key, needs a restart too.)

use std::sync::LazyLock;

use super::defaults::Settings;

/// The keys a running agent cannot change, in the order the table lists them: those
/// whose line in the table says `restart`.
pub static RESTART_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    Settings::every_key()
        .into_iter()
        .filter(|key| key.restart)
        .map(|key| key.name)
        .collect()
});

impl Settings {
    /// New settings for a running agent: `new` with the values of the keys that need a
    /// restart ([`RESTART_KEYS`]) taken from `self`, and the names of those that differed.
    pub fn live_update(&self, mut new: Settings) -> (Settings, Vec<&'static str>) {
        let mut kept = Vec::new();
        for &key in RESTART_KEYS.iter() {
            if new.copy_key(self, key) {
                kept.push(key);
            }
        }
        (new, kept)
    }
}
