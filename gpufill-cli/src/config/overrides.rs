//! [`Overrides`]: the values the command line gives, laid over the file. Which flag sets
//! which key is said once, on the key's line ([`Config::flag_of`]); the flags themselves
//! are built from those lines (`cli::KeyFlags`).

use gpufill_runtime::Flag;

use super::Config;

/// Values given on the command line: the keys the flags set, each with its value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// The values of the keys in `keys`; the defaults elsewhere.
    values: Config,
    /// The keys the flags set.
    keys: Vec<&'static str>,
}

impl Overrides {
    /// Marks `key` as set by a flag, and gives the configuration to write its value in
    /// (`overrides.set("tick_ms").tick_ms = 25`).
    pub fn set(&mut self, key: &'static str) -> &mut Config {
        if !self.keys.contains(&key) {
            self.keys.push(key);
        }
        &mut self.values
    }

    /// These overrides, then `more`'s over them.
    pub fn and(mut self, more: &Overrides) -> Overrides {
        for &key in &more.keys {
            self.set(key).copy_key(&more.values, key);
        }
        self
    }

    /// Lays these values over `config`. Validate afterwards.
    pub fn apply(&self, config: &mut Config) {
        for key in &self.keys {
            config.copy_key(&self.values, key);
        }
    }

    /// Whether these overrides set `key`.
    pub fn sets(&self, key: &str) -> bool {
        self.keys.contains(&key)
    }

    /// The flag that sets a config key, for error messages.
    pub fn flag_for_key(key: &str) -> Option<&'static str> {
        Config::flag_of(key).map(|flag: Flag| flag.long)
    }
}

impl Config {
    /// Lays the flags over the file's values. Validate afterwards.
    pub fn apply(&mut self, flags: &Overrides) {
        flags.apply(self);
    }
}
