//! The configuration file: TOML, with flags laid over it, resolved once into the
//! runtime's [`Settings`] ([`Config::to_settings`]); nothing past this module sees a
//! `Config`.
//!
//! Layering is defaults < file < flags: [`Config::default`] holds the defaults (the
//! runtime's [`Settings::default`] plus the binary's `[metrics]`; the shipped
//! `gpufill.example.toml` lists them, and a test keeps the two equal), [`Config::load`]
//! reads a file over them, and [`Config::apply`] lays the flags ([`Overrides`]) on top.
//! Every rule lives in one place, [`Settings::validate`]: [`Config::validate`] calls it
//! (and checks `metrics.listen`), for a file and again after the flags, so a value is
//! judged by the same code wherever it came from.
//!
//! Keys carry their unit (`tick_ms`, `grace_s`). Unknown keys are errors at every level,
//! so a typo never silently falls back to a default. NaN and infinities (which TOML
//! allows) are rejected.
//!
//! Every [`ConfigError`] reads `file:line:column: key: reason`, leaving out what is
//! unknown: the file when the text has none, the position when the value did not come
//! from the text (a default, a flag). Positions come from the spans the `toml` crate
//! keeps; the dotted key is found by locating that span in the parsed document, as
//! `toml::de::Error` does not expose its key path.
//!
//! The choices (`controller`, `metric`, `load.kernel`, `yield.policy`, `yield.mps`) are
//! the runtime's and core's own enums, read by name through their `FromStr`
//! (`named`): one enum per choice.

mod de;
mod error;
mod named;
mod overrides;
#[cfg(test)]
mod props;
mod tables;
#[cfg(test)]
mod tests;

use std::path::Path;

use gpufill_core::ControllerKind;
use gpufill_cuda::SpinKernel;
use gpufill_runtime::bounds::{KERNEL_US, MAX_KERNEL_US, PERIOD_MS, TICK_MS, WIDTH_BLOCKS};
use gpufill_runtime::{
    GpuSelector, LoadSettings, Metric, MpsChoice, ProbeSettings, Settings, YieldPolicyChoice,
    YieldingSettings,
};
use serde::{Deserialize, Serialize};
use toml::de::DeTable;

use de::{int_in, number, pids, table};
pub use error::{ConfigError, Position};
use error::{key_at, span_of_key};
pub use overrides::Overrides;
pub use tables::{MetricsConfig, ScheduleConfig, WindowConfig};

// Integer bounds as const generics for the deserializer (so a file gets the message
// with its position); the values are the runtime's ([`gpufill_runtime::bounds`]).
const TICK_MS_MIN: u64 = TICK_MS.0;
const TICK_MS_MAX: u64 = TICK_MS.1;
const WIDTH_MIN: u64 = WIDTH_BLOCKS.0;
const WIDTH_MAX: u64 = WIDTH_BLOCKS.1;
const PERIOD_MS_MIN: u64 = PERIOD_MS.0;
const PERIOD_MS_MAX: u64 = PERIOD_MS.1;
const MAX_KERNEL_US_MIN: u64 = MAX_KERNEL_US.0;
const MAX_KERNEL_US_MAX: u64 = MAX_KERNEL_US.1;
// 0 (bursts beside holders) or KERNEL_US: the gap is the runtime's check.
const KERNEL_US_MAX: u64 = KERNEL_US.1;

/// The whole configuration, as in `gpufill.toml`. Every key is optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Utilization to hold, percent in `[0, 100]`.
    #[serde(deserialize_with = "number")]
    pub target_percent: f64,
    /// Which GPUs to fill.
    #[serde(with = "named::gpus")]
    pub gpus: GpuSelector,
    /// Which controller turns measured utilization into duty.
    #[serde(with = "named::choice")]
    pub controller: ControllerKind,
    /// What is held at the target: NVML utilization, or GPM SM utilization.
    #[serde(with = "named::choice")]
    pub metric: Metric,
    /// Loop tick in milliseconds, `1..=1000`: how often processes and utilization are
    /// read, and when bursts may start (so it divides `load.period_ms`).
    #[serde(deserialize_with = "int_in::<_, _, TICK_MS_MIN, TICK_MS_MAX>")]
    pub tick_ms: u64,
    /// The `[load]` table: the shape of our kernels.
    #[serde(deserialize_with = "table")]
    pub load: LoadConfig,
    /// The `[yield]` table: when to stand aside.
    #[serde(rename = "yield", deserialize_with = "table")]
    pub yielding: YieldConfig,
    /// The `[probe]` table: how measurement faults are handled.
    #[serde(deserialize_with = "table")]
    pub probe: ProbeConfig,
    /// The `[schedule]` table: the idle rule and time-of-day windows.
    #[serde(deserialize_with = "table")]
    pub schedule: ScheduleConfig,
    /// The `[metrics]` table: the Prometheus endpoint.
    #[serde(deserialize_with = "table")]
    pub metrics: MetricsConfig,
}

impl Default for Config {
    /// The runtime's defaults, and no metrics endpoint.
    fn default() -> Self {
        Config::from_settings(&Settings::default(), MetricsConfig::default())
    }
}

/// The `[load]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadConfig {
    /// One-warp blocks per kernel, `1..=65535`: our share of the SMs.
    #[serde(deserialize_with = "int_in::<_, _, WIDTH_MIN, WIDTH_MAX>")]
    pub width_blocks: u32,
    /// Upper bound of our own time share, percent in `[0, 100]`.
    #[serde(deserialize_with = "number")]
    pub max_duty_percent: f64,
    /// Launch period in milliseconds, `1..=1000`, a multiple of `tick_ms`.
    #[serde(deserialize_with = "int_in::<_, _, PERIOD_MS_MIN, PERIOD_MS_MAX>")]
    pub period_ms: u64,
    /// Longest single kernel in microseconds, `10..=1000000`.
    #[serde(deserialize_with = "int_in::<_, _, MAX_KERNEL_US_MIN, MAX_KERNEL_US_MAX>")]
    pub max_kernel_us: u64,
    /// Beside a dormant holder: 0 for bursts, or one kernel of this many microseconds in
    /// flight at a time, `10..=100000` and at most the period.
    #[serde(deserialize_with = "int_in::<_, _, 0, KERNEL_US_MAX>")]
    pub beside_kernel_us: u64,
    /// The spin kernel: `spin` (busy-wait) or `sleep` (busy-wait with nanosleep).
    #[serde(with = "named::choice")]
    pub kernel: SpinKernel,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Config::default().load
    }
}

/// The `[yield]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct YieldConfig {
    /// Which yield policy decides when to stand aside.
    #[serde(with = "named::choice")]
    pub policy: YieldPolicyChoice,
    /// MPS co-residence: `auto` (when an MPS control daemon runs), `on` or `off`. Under
    /// MPS gpufill never yields; it fills only the gap others leave.
    #[serde(with = "named::choice")]
    pub mps: MpsChoice,
    /// Seconds to stay idle after the last foreign process has gone, `[0, 86400]`.
    #[serde(deserialize_with = "number")]
    pub grace_s: f64,
    /// `activity` only: seconds a listed process must have run no kernel before
    /// gpufill fills beside it, `[0, 86400]`.
    #[serde(deserialize_with = "number")]
    pub idle_grace_s: f64,
    /// PIDs that never count as foreign.
    #[serde(deserialize_with = "pids")]
    pub ignore_pids: Vec<u32>,
    /// Process names (last path component) that never count as foreign.
    pub ignore_names: Vec<String>,
    /// Drop the CUDA context after yielding for `release_after_s`, so a yielding
    /// gpufill holds no GPU memory; it is created again on resume.
    pub release_context: bool,
    /// Seconds of yielding before the context is dropped, `[0, 86400]`.
    #[serde(deserialize_with = "number")]
    pub release_after_s: f64,
}

impl Default for YieldConfig {
    fn default() -> Self {
        Config::default().yielding
    }
}

/// The `[probe]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeConfig {
    /// Seconds a failing probe is trusted (the last load held) before the loop idles,
    /// `[0, 3600]`.
    #[serde(deserialize_with = "number")]
    pub fault_hold_s: f64,
    /// Seconds before the first attempt to reopen a lost GPU, `[0.01, 3600]`; doubles
    /// after every failed attempt.
    #[serde(deserialize_with = "number")]
    pub retry_initial_s: f64,
    /// The longest wait between attempts to reopen a lost GPU, `[retry_initial_s, 86400]`.
    #[serde(deserialize_with = "number")]
    pub retry_max_s: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Config::default().probe
    }
}
impl Config {
    /// Parses and validates a configuration from TOML text. `origin` is the file the
    /// text came from, named in errors.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] when the text is not TOML; [`ConfigError::Invalid`] for an
    /// unknown key, a wrong type or a value out of range.
    pub fn from_toml_str(text: &str, origin: Option<&Path>) -> Result<Config, ConfigError> {
        let owned_origin = || origin.map(Path::to_path_buf);
        let document = DeTable::parse(text).map_err(|e| ConfigError::Syntax {
            origin: owned_origin(),
            position: e.span().map(|span| Position::of_offset(text, span.start)),
            reason: name_the_duplicate(text, e.message(), e.span()),
        })?;
        let config =
            Config::deserialize(toml::de::Deserializer::from(document.clone())).map_err(|e| {
                let offset = e.span().map(|span| span.start);
                ConfigError::Invalid {
                    origin: owned_origin(),
                    position: offset.map(|at| Position::of_offset(text, at)),
                    key: offset.and_then(|at| key_at(document.get_ref(), at)),
                    reason: e.message().to_owned(),
                }
            })?;
        let in_file = |key: &str| span_of_key(document.get_ref(), key).is_some();
        config.validate_blaming(origin, in_file).map_err(|mut e| {
            if let ConfigError::Invalid {
                position: p @ None,
                key: Some(key),
                ..
            } = &mut e
            {
                *p = span_of_key(document.get_ref(), key)
                    .map(|span| Position::of_offset(text, span.start));
            }
            e
        })?;
        Ok(config)
    }

    /// Reads, parses and validates a configuration file: a regular file (a FIFO or a
    /// device such as `/dev/zero` is refused without a blocking open or a read, so it
    /// can neither block a reload nor fill memory) of at most [`MAX_FILE_BYTES`].
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read, else as
    /// [`Config::from_toml_str`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (text, _) = read_text(path)?;
        Config::from_toml_str(&text, Some(path))
    }

    /// Whether `text` is TOML that sets no key at all (empty, blank or only comments):
    /// all defaults, as at start, but on a reload more likely a file an editor has just
    /// truncated than a wish.
    pub fn sets_no_key(text: &str) -> bool {
        DeTable::parse(text).is_ok_and(|doc| doc.get_ref().is_empty())
    }

    /// Checks every range and the relations between keys. Both loaders call it; call it
    /// again after [`Config::apply`], so flags are judged by the same rules.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `origin`, the key and the reason, for the first
    /// problem found.
    pub fn validate(&self, origin: Option<&Path>) -> Result<(), ConfigError> {
        self.validate_blaming(origin, |_| false)
    }

    /// [`Config::validate`], where a broken relation between two keys is blamed on the
    /// one `set_by_user` says the user set, when only one of them is: a file with only
    /// `tick_ms = 49` hears about `tick_ms`, not about `load.period_ms` it never wrote.
    ///
    /// # Errors
    /// As [`Config::validate`].
    pub fn validate_blaming(
        &self,
        origin: Option<&Path>,
        set_by_user: impl Fn(&str) -> bool,
    ) -> Result<(), ConfigError> {
        if let Err(e) = self.to_settings().validate() {
            let e = match &e.other {
                Some((other, _)) if !set_by_user(e.key) && set_by_user(other) => {
                    let other = *other;
                    e.blaming(other)
                }
                _ => e,
            };
            return Err(ConfigError::invalid(origin, e.key, e.reason));
        }
        match self.metrics.problem() {
            None => Ok(()),
            Some((key, reason)) => Err(ConfigError::invalid(origin, key, reason)),
        }
    }

    /// The runtime's settings: every key but `[metrics]`, which only the binary has.
    pub fn to_settings(&self) -> Settings {
        let (load, y, probe) = (&self.load, &self.yielding, &self.probe);
        Settings {
            target_percent: self.target_percent,
            gpus: self.gpus.clone(),
            controller: self.controller,
            metric: self.metric,
            tick_ms: self.tick_ms,
            load: LoadSettings {
                width_blocks: load.width_blocks,
                max_duty_percent: load.max_duty_percent,
                period_ms: load.period_ms,
                max_kernel_us: load.max_kernel_us,
                beside_kernel_us: load.beside_kernel_us,
                kernel: load.kernel,
            },
            yielding: YieldingSettings {
                policy: y.policy,
                mps: y.mps,
                grace_s: y.grace_s,
                idle_grace_s: y.idle_grace_s,
                ignore_pids: y.ignore_pids.clone(),
                ignore_names: y.ignore_names.clone(),
                release_context: y.release_context,
                release_after_s: y.release_after_s,
            },
            probe: ProbeSettings {
                fault_hold_s: probe.fault_hold_s,
                retry_initial_s: probe.retry_initial_s,
                retry_max_s: probe.retry_max_s,
            },
            schedule: self.schedule.to_settings(),
        }
    }

    /// The configuration that gives `settings`, with `metrics`.
    pub fn from_settings(settings: &Settings, metrics: MetricsConfig) -> Config {
        let (load, y, probe) = (&settings.load, &settings.yielding, &settings.probe);
        Config {
            target_percent: settings.target_percent,
            gpus: settings.gpus.clone(),
            controller: settings.controller,
            metric: settings.metric,
            tick_ms: settings.tick_ms,
            load: LoadConfig {
                width_blocks: load.width_blocks,
                max_duty_percent: load.max_duty_percent,
                period_ms: load.period_ms,
                max_kernel_us: load.max_kernel_us,
                beside_kernel_us: load.beside_kernel_us,
                kernel: load.kernel,
            },
            yielding: YieldConfig {
                policy: y.policy,
                mps: y.mps,
                grace_s: y.grace_s,
                idle_grace_s: y.idle_grace_s,
                ignore_pids: y.ignore_pids.clone(),
                ignore_names: y.ignore_names.clone(),
                release_context: y.release_context,
                release_after_s: y.release_after_s,
            },
            probe: ProbeConfig {
                fault_hold_s: probe.fault_hold_s,
                retry_initial_s: probe.retry_initial_s,
                retry_max_s: probe.retry_max_s,
            },
            schedule: ScheduleConfig::from_settings(&settings.schedule),
            metrics,
        }
    }

    /// The settings as TOML, every key present, for `gpufill config check` to print.
    /// Parsing the result gives back an equal configuration.
    pub fn to_toml_string(&self) -> String {
        // Every field serializes to TOML (no maps with odd keys, no `None`), so this
        // cannot fail; the fallback is still a TOML comment rather than a panic.
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render the settings: {e}\n"))
    }
}

/// The largest config file read: far above any real one (the example with every key
/// and its comments is about 5 KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a configuration file as text (see [`Config::load`]), with its modification
/// time when the file system gives one.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read or is not a regular file of at
/// most [`MAX_FILE_BYTES`]; [`ConfigError::Syntax`] when it is not UTF-8.
pub fn read_text(path: &Path) -> Result<(String, Option<std::time::SystemTime>), ConfigError> {
    let (bytes, modified) = read_limited(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let valid = std::str::from_utf8(valid).unwrap_or_default();
        ConfigError::Syntax {
            origin: Some(path.to_path_buf()),
            position: Some(Position::of_offset(valid, valid.len())),
            reason: "not valid UTF-8".to_owned(),
        }
    })?;
    Ok((text, modified))
}

/// Reads `path` if it is a regular file of at most [`MAX_FILE_BYTES`], with the
/// modification time of the file read.
fn read_limited(path: &Path) -> std::io::Result<(Vec<u8>, Option<std::time::SystemTime>)> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking;
    // the type is then checked on the opened file, so nothing can swap it in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a config is read from a plain file only)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok((bytes, meta.modified().ok()))
}

/// toml says only "duplicate key" for a key or a table given twice; its span covers
/// the name, which the message then names.
fn name_the_duplicate(text: &str, message: &str, span: Option<std::ops::Range<usize>>) -> String {
    let name = span
        .filter(|_| message.starts_with("duplicate"))
        .and_then(|span| text.get(span))
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.contains('\n'));
    match name {
        Some(name) => format!("{message} `{name}`"),
        None => message.to_owned(),
    }
}
