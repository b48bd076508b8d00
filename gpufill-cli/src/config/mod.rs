//! The configuration: a TOML file, flags that override it, and the settings the core
//! receives.
//!
//! Layering is defaults < file < flags: [`Config::default`] holds the defaults (the
//! shipped `gpufill.example.toml` lists them, and a test keeps the two equal),
//! [`Config::load`] reads a file over them, and [`Config::apply`] lays the flags
//! ([`Overrides`]) on top. Range checks live in one place, [`Config::validate`]: both
//! loaders call it, and the binary calls it again after applying flags, so a value is
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
//! After validation the configuration resolves into core types without failing:
//! [`Config::fill_settings`], [`Config::yield_settings`], [`Config::controller_kind`],
//! [`Config::tick`], [`Config::period`], [`Config::max_kernel`], [`Config::schedule`].

mod choices;
mod de;
mod error;
mod gpus;
mod metric;
#[cfg(test)]
mod props;
mod tables;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use gpufill_core::{
    ControllerKind, Duty, FillSettings, Shaping, Utilization, Width, YieldMode, YieldSettings,
};
use serde::{Deserialize, Serialize};
use toml::de::DeTable;

pub use choices::{ControllerChoice, MpsChoice, YieldPolicyChoice};
use de::{float_problem, int_in, int_problem, number, pids, table};
pub use error::{ConfigError, Position};
use error::{key_at, span_of_key};
pub use gpus::{GpuId, GpuSelector};
pub use metric::{KernelChoice, MetricChoice};
pub use tables::{MetricsConfig, ScheduleConfig, WindowConfig};

// Integer bounds, shared by the deserializer (so a file gets the message with its
// position) and `validate` (so flags get the same message).
const TICK_MS_MIN: u64 = 1;
const TICK_MS_MAX: u64 = 1000;
const WIDTH_MIN: u64 = 1;
const WIDTH_MAX: u64 = 65535;
const PERIOD_MS_MIN: u64 = 1;
const PERIOD_MS_MAX: u64 = 1000;
const KERNEL_US_MIN: u64 = 10;
const KERNEL_US_MAX: u64 = 100_000;
const PID_MIN: u64 = 1;
const PID_MAX: u64 = u32::MAX as u64;

/// The whole configuration, as in `gpufill.toml`. Every key is optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Utilization to hold, percent in `[0, 100]`.
    #[serde(deserialize_with = "number")]
    pub target_percent: f64,
    /// Which GPUs to fill.
    pub gpus: GpuSelector,
    /// Which controller turns measured utilization into duty.
    pub controller: ControllerChoice,
    /// What is held at the target: NVML utilization, or GPM SM utilization.
    pub metric: MetricChoice,
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
    fn default() -> Self {
        Config {
            target_percent: 50.0,
            gpus: GpuSelector::All,
            controller: ControllerChoice::Pi,
            metric: MetricChoice::Util,
            tick_ms: 50,
            load: LoadConfig::default(),
            yielding: YieldConfig::default(),
            probe: ProbeConfig::default(),
            schedule: ScheduleConfig::default(),
            metrics: MetricsConfig::default(),
        }
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
    /// Longest single kernel in microseconds, `10..=100000`, and at most the period.
    #[serde(deserialize_with = "int_in::<_, _, KERNEL_US_MIN, KERNEL_US_MAX>")]
    pub max_kernel_us: u64,
    /// The spin kernel: `spin` (busy-wait) or `sleep` (busy-wait with nanosleep).
    pub kernel: KernelChoice,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            width_blocks: 1,
            max_duty_percent: 100.0,
            period_ms: 50,
            max_kernel_us: 2000,
            kernel: KernelChoice::Sleep,
        }
    }
}

/// The `[yield]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct YieldConfig {
    /// Which yield policy decides when to stand aside.
    pub policy: YieldPolicyChoice,
    /// MPS co-residence: `auto` (when an MPS control daemon runs), `on` or `off`. Under
    /// MPS gpufill never yields; it fills only the gap others leave.
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
        YieldConfig {
            policy: YieldPolicyChoice::Presence,
            mps: MpsChoice::Auto,
            grace_s: 5.0,
            idle_grace_s: 30.0,
            ignore_pids: Vec::new(),
            ignore_names: Vec::new(),
            release_context: false,
            release_after_s: 60.0,
        }
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
        ProbeConfig {
            fault_hold_s: 2.0,
            retry_initial_s: 1.0,
            retry_max_s: 300.0,
        }
    }
}
/// Values given on the command line, one per flag; `None` leaves the file's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// `--target-percent`.
    pub target_percent: Option<f64>,
    /// `--gpus`.
    pub gpus: Option<GpuSelector>,
    /// `--controller`.
    pub controller: Option<ControllerChoice>,
    /// `--metric`.
    pub metric: Option<MetricChoice>,
    /// `--kernel`.
    pub kernel: Option<KernelChoice>,
    /// `--tick-ms`.
    pub tick_ms: Option<u64>,
    /// `--width-blocks`.
    pub width_blocks: Option<u32>,
    /// `--max-duty-percent`.
    pub max_duty_percent: Option<f64>,
    /// `--period-ms`.
    pub period_ms: Option<u64>,
    /// `--max-kernel-us`.
    pub max_kernel_us: Option<u64>,
    /// `--grace-s`.
    pub grace_s: Option<f64>,
    /// `--fault-hold-s`.
    pub fault_hold_s: Option<f64>,
    /// `--metrics`.
    pub metrics_listen: Option<String>,
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
            reason: e.message().to_owned(),
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
        config.validate(origin).map_err(|mut e| {
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

    /// Reads, parses and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read, else as
    /// [`Config::from_toml_str`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let bytes = std::fs::read(path).map_err(|error| ConfigError::Read {
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
        Config::from_toml_str(&text, Some(path))
    }

    /// Checks every range and the relations between keys. Both loaders call it; call it
    /// again after [`Config::apply`], so flags are judged by the same rules.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `origin`, the key and the reason, for the first
    /// problem found.
    pub fn validate(&self, origin: Option<&Path>) -> Result<(), ConfigError> {
        match self.problem() {
            None => Ok(()),
            Some((key, reason)) => Err(ConfigError::invalid(origin, key, reason)),
        }
    }

    fn problem(&self) -> Option<(&'static str, String)> {
        let load = &self.load;
        let checks = [
            (
                "target_percent",
                float_problem(self.target_percent, 0.0, 100.0),
            ),
            ("gpus", self.gpus.check().err()),
            (
                "tick_ms",
                int_problem(self.tick_ms, TICK_MS_MIN, TICK_MS_MAX),
            ),
            (
                "load.width_blocks",
                int_problem(u64::from(load.width_blocks), WIDTH_MIN, WIDTH_MAX),
            ),
            (
                "load.max_duty_percent",
                float_problem(load.max_duty_percent, 0.0, 100.0),
            ),
            (
                "load.period_ms",
                int_problem(load.period_ms, PERIOD_MS_MIN, PERIOD_MS_MAX),
            ),
            (
                "load.max_kernel_us",
                int_problem(load.max_kernel_us, KERNEL_US_MIN, KERNEL_US_MAX),
            ),
            ("load.max_kernel_us", self.kernel_longer_than_period()),
            ("load.period_ms", self.period_off_the_tick()),
            (
                "yield.grace_s",
                float_problem(self.yielding.grace_s, 0.0, 86400.0),
            ),
            (
                "yield.idle_grace_s",
                float_problem(self.yielding.idle_grace_s, 0.0, 86400.0),
            ),
            ("yield.ignore_names", self.empty_name()),
            (
                "yield.release_after_s",
                float_problem(self.yielding.release_after_s, 0.0, 86400.0),
            ),
            (
                "probe.fault_hold_s",
                float_problem(self.probe.fault_hold_s, 0.0, 3600.0),
            ),
            (
                "probe.retry_initial_s",
                float_problem(self.probe.retry_initial_s, 0.01, 3600.0),
            ),
            (
                "probe.retry_max_s",
                float_problem(self.probe.retry_max_s, self.probe.retry_initial_s, 86400.0),
            ),
        ];
        checks
            .into_iter()
            .find_map(|(key, problem)| problem.map(|reason| (key, reason)))
            .or_else(|| self.schedule.problem())
            .or_else(|| self.metrics.problem())
    }

    fn kernel_longer_than_period(&self) -> Option<String> {
        let period_us = self.load.period_ms.saturating_mul(1000);
        (self.load.max_kernel_us > period_us).then(|| {
            format!(
                "must not exceed load.period_ms ({} ms = {period_us} us), got {}",
                self.load.period_ms, self.load.max_kernel_us
            )
        })
    }

    /// Bursts start only at ticks (the launcher runs in the loop's thread, right after
    /// the process check), so a period that is not a whole number of ticks cannot be kept.
    fn period_off_the_tick(&self) -> Option<String> {
        let (period, tick) = (self.load.period_ms, self.tick_ms);
        (tick > 0 && period % tick != 0).then(|| {
            format!(
                "must be a multiple of tick_ms ({tick} ms): bursts start only at ticks, got {period}"
            )
        })
    }

    fn empty_name(&self) -> Option<String> {
        let bad = self
            .yielding
            .ignore_names
            .iter()
            .any(|n| n.is_empty() || n.contains('/'));
        bad.then(|| "names must be non-empty and without '/' (the last path component)".to_string())
    }

    /// Lays the flags over the file's values. Validate afterwards.
    pub fn apply(&mut self, flags: &Overrides) {
        fn set<T: Clone>(field: &mut T, flag: &Option<T>) {
            if let Some(value) = flag {
                *field = value.clone();
            }
        }
        set(&mut self.target_percent, &flags.target_percent);
        set(&mut self.gpus, &flags.gpus);
        set(&mut self.controller, &flags.controller);
        set(&mut self.metric, &flags.metric);
        set(&mut self.load.kernel, &flags.kernel);
        set(&mut self.tick_ms, &flags.tick_ms);
        set(&mut self.load.width_blocks, &flags.width_blocks);
        set(&mut self.load.max_duty_percent, &flags.max_duty_percent);
        set(&mut self.load.period_ms, &flags.period_ms);
        set(&mut self.load.max_kernel_us, &flags.max_kernel_us);
        set(&mut self.yielding.grace_s, &flags.grace_s);
        set(&mut self.probe.fault_hold_s, &flags.fault_hold_s);
        set(&mut self.metrics.listen, &flags.metrics_listen);
    }

    /// The fill loop's settings. Meant for a validated configuration; out-of-range
    /// values are clamped rather than panicking.
    pub fn fill_settings(&self) -> FillSettings {
        FillSettings {
            target: Utilization::saturating_from_fraction(self.target_percent / 100.0),
            width: Width::blocks(self.load.width_blocks).unwrap_or(Width::ONE_WARP),
            // The SM count comes from the device: `run` and `simulate` set the shaping.
            shaping: Shaping::Fixed,
            max_duty: Duty::clamped(self.load.max_duty_percent / 100.0),
            fault_hold: seconds(self.probe.fault_hold_s),
            release_after: self
                .yielding
                .release_context
                .then(|| seconds(self.yielding.release_after_s)),
        }
    }

    /// How a lost GPU is reopened.
    pub fn retry_settings(&self) -> gpufill_core::RetrySettings {
        gpufill_core::RetrySettings {
            initial: seconds(self.probe.retry_initial_s),
            max: seconds(self.probe.retry_max_s),
            ..gpufill_core::RetrySettings::default()
        }
    }

    /// The schedule: `target_percent` as the default, with the `[schedule]` rules.
    pub fn schedule(&self) -> gpufill_core::Schedule {
        self.schedule.resolve(Utilization::saturating_from_fraction(
            self.target_percent / 100.0,
        ))
    }

    /// The yield policy's settings when no MPS daemon runs.
    pub fn yield_settings(&self) -> YieldSettings {
        self.yield_settings_with(false)
    }

    /// The yield policy's settings, given whether an MPS control daemon runs.
    pub fn yield_settings_with(&self, mps_running: bool) -> YieldSettings {
        let mps = match self.yielding.mps {
            MpsChoice::Auto => mps_running,
            MpsChoice::On => true,
            MpsChoice::Off => false,
        };
        let mode = match self.yielding.policy {
            _ if mps => YieldMode::Mps,
            YieldPolicyChoice::Presence => YieldMode::Presence,
            YieldPolicyChoice::Activity => YieldMode::Activity {
                idle_grace: seconds(self.yielding.idle_grace_s),
            },
        };
        YieldSettings {
            mode,
            grace: seconds(self.yielding.grace_s),
            ignore_pids: self.yielding.ignore_pids.clone(),
            ignore_names: self.yielding.ignore_names.clone(),
        }
    }

    /// The yield policy chosen.
    pub fn yield_policy(&self) -> YieldPolicyChoice {
        self.yielding.policy
    }

    /// The controller chosen, as the core names it.
    pub fn controller_kind(&self) -> ControllerKind {
        match self.controller {
            ControllerChoice::Pi => ControllerKind::Pi,
            ControllerChoice::Window => ControllerKind::Window,
        }
    }

    /// The loop tick.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    /// The launch period.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.load.period_ms)
    }

    /// The longest single kernel.
    pub fn max_kernel(&self) -> Duration {
        Duration::from_micros(self.load.max_kernel_us)
    }

    /// The settings as TOML, every key present, for `gpufill config check` to print.
    /// Parsing the result gives back an equal configuration.
    pub fn to_toml_string(&self) -> String {
        // Every field serializes to TOML (no maps with odd keys, no `None`), so this
        // cannot fail; the fallback is still a TOML comment rather than a panic.
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render the settings: {e}\n"))
    }
}

/// Seconds as a `Duration`, saturating instead of panicking on values that validation
/// would have refused.
pub(crate) fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}
