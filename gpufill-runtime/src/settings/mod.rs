//! [`Settings`]: everything a running gpufill is told, as plain values.
//!
//! Each key is defined once, in `defaults.rs`: its doc, type, default, rule, whether it
//! needs a restart and its flag, in one line of [`settings_table!`](table). The fields are the keys of gpufill's TOML file
//! one to one (`yield.grace_s` is `settings.yielding.grace_s`), with their units in
//! their names, so a key, a flag and a field are found by the same words. The other
//! files each do one job with them:
//! - `validate.rs`: [`Settings::validate`], every key against its rule, then the
//!   relations between keys; the binary's file and flag parsers call it too, so a value
//!   is judged by the same code wherever it came from;
//! - `convert.rs`: the core's types, which validated settings resolve into without
//!   failing: [`Settings::fill_settings`], [`Settings::yield_settings`],
//!   [`Settings::schedule`], [`Settings::retry_settings`],
//!   [`Settings::launcher_settings`];
//! - `key.rs`: what a line says beside the value ([`Key`]): whether it needs a restart,
//!   and its flag ([`Flag`], [`FlagValue`]), as plain data for the binary;
//! - `live.rs`: what a running agent takes from new settings ([`RESTART_KEYS`]);
//! - `file.rs` (feature `serde`): how a file reads and writes them, by the same rules.

#[macro_use]
mod table;
mod convert;
mod defaults;
#[cfg(feature = "serde")]
pub(crate) mod file;
mod key;
mod live;
pub(crate) mod rules;
#[cfg(test)]
mod tests;
mod validate;
mod window;

pub use defaults::{
    LoadSettings, Metric, MpsChoice, ProbeSettings, ScheduleSettings, Settings, YieldPolicyChoice,
    YieldingSettings,
};
pub(crate) use key::FlagRule;
pub use key::{Chosen, Flag, FlagValue, Key};
pub use live::RESTART_KEYS;
pub use validate::SettingsError;
pub use window::WindowSettings;
