//! [`Settings`]: everything a running gpufill is told, as plain values.
//!
//! The fields mirror the keys of gpufill's TOML file one to one (`yield.grace_s` is
//! `settings.yielding.grace_s`), with their units in their names, so a key, a flag and
//! a field are found by the same words. [`Settings::default`] holds the product's
//! defaults (the shipped `gpufill.example.toml` lists them, and a test in `gpufill-cli`
//! keeps the two equal). [`Settings::validate`] holds every rule, ranges and the
//! relations between keys; the binary's file and flag parsers call it too, so a value is
//! judged by the same code wherever it came from.
//!
//! After validation the settings resolve into the core's types without failing:
//! [`Settings::fill_settings`], [`Settings::yield_settings`], [`Settings::schedule`],
//! [`Settings::retry_settings`], [`Settings::launcher_settings`].

use std::fmt;
use std::time::Duration;

use gpufill_core::{
    ControllerKind, Duty, FillSettings, IdleRule, PowerModel, RetrySettings, Schedule, Shaping,
    SmShaping, TimeOfDay, Utilization, Width, Window, YieldMode, YieldSettings,
};
use gpufill_cuda::{LauncherSettings, SpinKernel};

use crate::gpus::GpuSelector;

/// Bounds of `tick_ms`.
pub const TICK_MS: (u64, u64) = (1, 1000);
/// Bounds of `load.width_blocks`.
pub const WIDTH_BLOCKS: (u64, u64) = (1, 65535);
/// Bounds of `load.period_ms`.
pub const PERIOD_MS: (u64, u64) = (1, 1000);
/// Bounds of `load.max_kernel_us`.
pub const MAX_KERNEL_US: (u64, u64) = (10, 1_000_000);
/// Bounds of `load.beside_kernel_us` when it is not 0.
pub const KERNEL_US: (u64, u64) = (10, 100_000);
/// Bounds of a PID in `yield.ignore_pids`.
pub const PID: (u64, u64) = (1, u32::MAX as u64);
/// Longest `schedule.idle_after_s`: 30 days.
pub const IDLE_AFTER_MAX_S: f64 = 30.0 * 86400.0;

/// Everything a running gpufill is told. Build it with `..Settings::default()` and
/// check it with [`Settings::validate`].
///
/// ```
/// use gpufill_runtime::Settings;
///
/// let mut settings = Settings { target_percent: 40.0, ..Settings::default() };
/// assert!(settings.validate().is_ok());
/// settings.tick_ms = 40; // 50 ms bursts cannot start on 40 ms ticks
/// let e = settings.validate().unwrap_err();
/// assert_eq!(e.key, "load.period_ms");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Utilization to hold, percent in `[0, 100]` (`target_percent`).
    pub target_percent: f64,
    /// Which GPUs to fill (`gpus`).
    pub gpus: GpuSelector,
    /// Which controller turns measured utilization into duty (`controller`).
    pub controller: ControllerKind,
    /// What is held at the target (`metric`).
    pub metric: Metric,
    /// Loop tick in milliseconds, `1..=1000`: how often processes and utilization are
    /// read, and when bursts may start (so it divides `load.period_ms`).
    pub tick_ms: u64,
    /// The shape of our kernels (`[load]`).
    pub load: LoadSettings,
    /// When to stand aside (`[yield]`).
    pub yielding: YieldingSettings,
    /// How measurement faults and lost GPUs are handled (`[probe]`).
    pub probe: ProbeSettings,
    /// The idle rule and time-of-day windows (`[schedule]`).
    pub schedule: ScheduleSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            target_percent: 50.0,
            gpus: GpuSelector::All,
            controller: ControllerKind::Pi,
            metric: Metric::Util,
            tick_ms: 50,
            load: LoadSettings::default(),
            yielding: YieldingSettings::default(),
            probe: ProbeSettings::default(),
            schedule: ScheduleSettings::default(),
        }
    }
}

/// `[load]`: the shape of our kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadSettings {
    /// One-warp blocks per kernel, `1..=65535`: our share of the SMs.
    pub width_blocks: u32,
    /// Upper bound of our own time share, percent in `[0, 100]`.
    pub max_duty_percent: f64,
    /// Launch period in milliseconds, `1..=1000`, a multiple of `tick_ms`.
    pub period_ms: u64,
    /// Longest single kernel in microseconds, `10..=1000000`. The default, the period,
    /// makes each burst one kernel (the least CPU); a time slice, not our kernel's
    /// length, bounds what another context waits for it (docs/benchmarks.md, "Live
    /// services").
    pub max_kernel_us: u64,
    /// Beside a dormant holder of the GPU: 0 (the default) fills with the same bursts
    /// as on a GPU of our own, so the holder's first request after a dormant spell waits
    /// at most a time slice; `10..=100000` (at most the period) keeps one kernel of
    /// this many microseconds in flight at a time instead, so that request waits at
    /// most that long, for a wake-up per kernel (several percent of a core at 500 us:
    /// docs/benchmarks.md, "Live services").
    pub beside_kernel_us: u64,
    /// The spin kernel.
    pub kernel: SpinKernel,
}

impl Default for LoadSettings {
    fn default() -> Self {
        LoadSettings {
            width_blocks: 1,
            max_duty_percent: 100.0,
            period_ms: 50,
            max_kernel_us: 50_000,
            beside_kernel_us: 0,
            kernel: SpinKernel::Sleep,
        }
    }
}

/// `[yield]`: when to stand aside.
#[derive(Clone, Debug, PartialEq)]
pub struct YieldingSettings {
    /// Which yield policy decides when to stand aside.
    pub policy: YieldPolicyChoice,
    /// MPS co-residence: under MPS gpufill never yields; it fills only the gap others leave.
    pub mps: MpsChoice,
    /// Seconds to stay idle after the last foreign process has gone, `[0, 86400]`.
    pub grace_s: f64,
    /// `activity` only: seconds a listed process must have run no kernel before
    /// gpufill fills beside it, `[0, 86400]`.
    pub idle_grace_s: f64,
    /// PIDs that never count as foreign.
    pub ignore_pids: Vec<u32>,
    /// Process names (last path component) that never count as foreign.
    pub ignore_names: Vec<String>,
    /// Drop the CUDA context after yielding for `release_after_s`, so a yielding
    /// gpufill holds no GPU memory; it is created again on resume.
    pub release_context: bool,
    /// Seconds of yielding before the context is dropped, `[0, 86400]`.
    pub release_after_s: f64,
}

impl Default for YieldingSettings {
    fn default() -> Self {
        YieldingSettings {
            policy: YieldPolicyChoice::Activity,
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

/// `[probe]`: faults of the measurement, and lost GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSettings {
    /// Seconds a failing probe is trusted (the last load held) before the loop idles,
    /// `[0, 3600]`.
    pub fault_hold_s: f64,
    /// Seconds before the first attempt to reopen a lost GPU, `[0.01, 3600]`; doubles
    /// after every failed attempt.
    pub retry_initial_s: f64,
    /// The longest wait between attempts to reopen a lost GPU, `[retry_initial_s, 86400]`.
    pub retry_max_s: f64,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            fault_hold_s: 2.0,
            retry_initial_s: 1.0,
            retry_max_s: 300.0,
        }
    }
}

/// `[schedule]`: the idle rule and daily windows. Precedence: a matching window (the
/// first listed), then the idle rule, then `target_percent`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleSettings {
    /// Seconds without foreign processes after which `idle_target_percent` holds; 0
    /// turns the idle rule off. `[0, 2592000]`.
    pub idle_after_s: f64,
    /// The target after `idle_after_s` without foreign processes, percent `[0, 100]`.
    pub idle_target_percent: f64,
    /// Daily windows in local time with their own target (`[[schedule.window]]`).
    pub windows: Vec<WindowSettings>,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        ScheduleSettings {
            idle_after_s: 0.0,
            idle_target_percent: 60.0,
            windows: Vec::new(),
        }
    }
}

/// One daily window, `[start, end)` in local time (it may cross midnight).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSettings {
    /// First minute inside.
    pub start: TimeOfDay,
    /// First minute outside; differs from `start`.
    pub end: TimeOfDay,
    /// The target inside, percent `[0, 100]` (0: gpufill off).
    pub target_percent: f64,
}

/// What the loop holds at the target (`metric`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Metric {
    /// NVML's utilization (share of time with a kernel resident): duty at a fixed width.
    #[default]
    Util,
    /// GPM's SM utilization (share of SMs busy; Hopper or later): width and duty.
    Sm,
}

/// The yield policy (`yield.policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum YieldPolicyChoice {
    /// `"presence"`: idle while any other compute process is on the GPU, even one that
    /// only holds a context. Its newcomers' first kernels and a holder's next kernel
    /// never meet ours, but a GPU held all day by a quiet service stays idle.
    Presence,
    /// `"activity"` (the default): idle while another process works, and until a
    /// newcomer has been quiet for `idle_grace_s`; then fill beside it one short kernel
    /// at a time, pausing while the utilization shows its bursts
    /// (docs/benchmarks.md, "Beside a mostly-idle service").
    #[default]
    Activity,
}

/// MPS co-residence (`yield.mps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MpsChoice {
    /// MPS mode when an MPS control daemon is found at start.
    #[default]
    Auto,
    /// Always MPS mode (never yield).
    On,
    /// Never MPS mode: the yield policy applies even under MPS.
    Off,
}

gpufill_core::named_choice!(Metric { Util => "util", Sm => "sm" });
gpufill_core::named_choice!(YieldPolicyChoice { Presence => "presence", Activity => "activity" });
gpufill_core::named_choice!(MpsChoice { Auto => "auto", On => "on", Off => "off" });

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

/// `must be between MIN and MAX, got V`: the range message every parser uses.
pub fn range_reason(
    min: impl fmt::Display,
    max: impl fmt::Display,
    got: impl fmt::Display,
) -> String {
    format!("must be between {min} and {max}, got {got}")
}

/// The range message when `v` is outside `min..=max`.
pub fn int_problem(v: u64, (min, max): (u64, u64)) -> Option<String> {
    (!(min..=max).contains(&v)).then(|| range_reason(min, max, v))
}

/// The range message when `v` is outside `[min, max]`, NaN or infinite.
pub fn float_problem(v: f64, min: f64, max: f64) -> Option<String> {
    // `contains` is false for NaN; infinities fall outside any finite range.
    (!(min..=max).contains(&v)).then(|| range_reason(min, max, v))
}

impl Settings {
    /// Checks every range and the relations between keys.
    ///
    /// # Errors
    /// [`SettingsError`] naming the key and the reason, for the first problem found.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if let Some((key, reason)) = self.problem() {
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
        for (key, kernel_us) in [("load.beside_kernel_us", load.beside_kernel_us)] {
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

    fn problem(&self) -> Option<(&'static str, String)> {
        let (load, yielding, probe, schedule) =
            (&self.load, &self.yielding, &self.probe, &self.schedule);
        let checks = [
            (
                "target_percent",
                float_problem(self.target_percent, 0.0, 100.0),
            ),
            ("gpus", self.gpus.check().err()),
            ("tick_ms", int_problem(self.tick_ms, TICK_MS)),
            (
                "load.width_blocks",
                int_problem(u64::from(load.width_blocks), WIDTH_BLOCKS),
            ),
            (
                "load.max_duty_percent",
                float_problem(load.max_duty_percent, 0.0, 100.0),
            ),
            ("load.period_ms", int_problem(load.period_ms, PERIOD_MS)),
            (
                "load.max_kernel_us",
                int_problem(load.max_kernel_us, MAX_KERNEL_US),
            ),
            (
                "load.beside_kernel_us",
                (load.beside_kernel_us != 0)
                    .then(|| int_problem(load.beside_kernel_us, KERNEL_US))
                    .flatten(),
            ),
            (
                "yield.grace_s",
                float_problem(yielding.grace_s, 0.0, 86400.0),
            ),
            (
                "yield.idle_grace_s",
                float_problem(yielding.idle_grace_s, 0.0, 86400.0),
            ),
            ("yield.ignore_pids", self.bad_pid()),
            ("yield.ignore_names", self.bad_name()),
            (
                "yield.release_after_s",
                float_problem(yielding.release_after_s, 0.0, 86400.0),
            ),
            (
                "probe.fault_hold_s",
                float_problem(probe.fault_hold_s, 0.0, 3600.0),
            ),
            (
                "probe.retry_initial_s",
                float_problem(probe.retry_initial_s, 0.01, 3600.0),
            ),
            (
                "probe.retry_max_s",
                float_problem(probe.retry_max_s, 0.01, 86400.0),
            ),
            (
                "schedule.idle_after_s",
                float_problem(schedule.idle_after_s, 0.0, IDLE_AFTER_MAX_S),
            ),
            (
                "schedule.idle_target_percent",
                float_problem(schedule.idle_target_percent, 0.0, 100.0),
            ),
            ("schedule.window", self.bad_window()),
        ];
        checks
            .into_iter()
            .find_map(|(key, problem)| problem.map(|reason| (key, reason)))
    }

    fn bad_pid(&self) -> Option<String> {
        let pids = &self.yielding.ignore_pids;
        pids.iter()
            .find_map(|&pid| int_problem(u64::from(pid), PID))
    }

    fn bad_name(&self) -> Option<String> {
        let bad = self
            .yielding
            .ignore_names
            .iter()
            .any(|n| n.is_empty() || n.contains('/'));
        bad.then(|| "names must be non-empty and without '/' (the last path component)".to_string())
    }

    fn bad_window(&self) -> Option<String> {
        self.schedule.windows.iter().find_map(|w| {
            if w.start == w.end {
                return Some(format!(
                    "start and end must differ, both are {} (the window would be empty)",
                    w.start
                ));
            }
            float_problem(w.target_percent, 0.0, 100.0).map(|r| format!("target_percent: {r}"))
        })
    }

    /// The target as a utilization.
    pub fn target(&self) -> Utilization {
        percent(self.target_percent)
    }

    /// The fill loop's settings, with the shaping for the `util` metric; the opened
    /// GPU sets the shaping of the `sm` metric ([`Settings::shaping`]). Meant for
    /// validated settings; out-of-range values are clamped rather than panicking.
    pub fn fill_settings(&self) -> FillSettings {
        FillSettings {
            target: self.target(),
            width: Width::blocks(self.load.width_blocks).unwrap_or(Width::ONE_WARP),
            shaping: Shaping::Fixed,
            max_duty: Duty::clamped(self.load.max_duty_percent / 100.0),
            fault_hold: seconds(self.probe.fault_hold_s),
            release_after: self
                .yielding
                .release_context
                .then(|| seconds(self.yielding.release_after_s)),
        }
    }

    /// How the loop turns its controller's output into a load on a GPU with
    /// `sm_count` SMs (read from the device).
    pub fn shaping(&self, sm_count: u32) -> Shaping {
        match self.metric {
            Metric::Util => Shaping::Fixed,
            Metric::Sm => Shaping::Sm(SmShaping::with_model(
                sm_count,
                power_model(self.load.kernel),
            )),
        }
    }

    /// How a lost GPU is reopened.
    pub fn retry_settings(&self) -> RetrySettings {
        RetrySettings {
            initial: seconds(self.probe.retry_initial_s),
            max: seconds(self.probe.retry_max_s),
            ..RetrySettings::default()
        }
    }

    /// The schedule: `target_percent` as the default, with the `[schedule]` rules.
    pub fn schedule(&self) -> Schedule {
        let s = &self.schedule;
        let idle = (s.idle_after_s > 0.0).then(|| IdleRule {
            after: seconds(s.idle_after_s),
            target: percent(s.idle_target_percent),
        });
        let windows = s
            .windows
            .iter()
            .map(|w| Window {
                start: w.start,
                end: w.end,
                target: percent(w.target_percent),
            })
            .collect();
        Schedule {
            default: self.target(),
            idle,
            windows,
        }
    }

    /// The yield policy's settings, given whether an MPS control daemon runs (it
    /// decides `yield.mps = "auto"`).
    pub fn yield_settings(&self, mps_running: bool) -> YieldSettings {
        let y = &self.yielding;
        let mps = match y.mps {
            MpsChoice::Auto => mps_running,
            MpsChoice::On => true,
            MpsChoice::Off => false,
        };
        let mode = match y.policy {
            _ if mps => YieldMode::Mps,
            YieldPolicyChoice::Presence => YieldMode::Presence,
            YieldPolicyChoice::Activity => YieldMode::Activity {
                idle_grace: seconds(y.idle_grace_s),
            },
        };
        YieldSettings {
            mode,
            grace: seconds(y.grace_s),
            ignore_pids: y.ignore_pids.clone(),
            ignore_names: y.ignore_names.clone(),
        }
    }

    /// The launcher's settings: period, longest kernel and kernel.
    pub fn launcher_settings(&self) -> LauncherSettings {
        LauncherSettings {
            period: Duration::from_millis(self.load.period_ms),
            max_kernel: Duration::from_micros(self.load.max_kernel_us),
            beside_kernel: (self.load.beside_kernel_us > 0)
                .then(|| Duration::from_micros(self.load.beside_kernel_us)),
            kernel: self.load.kernel,
            ..LauncherSettings::default()
        }
    }

    /// The loop tick.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

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

/// The power model the `sm` metric's shaper chooses shapes by, for `kernel`.
pub fn power_model(kernel: SpinKernel) -> PowerModel {
    match kernel {
        SpinKernel::Spin => PowerModel::H200_SPIN,
        SpinKernel::Sleep => PowerModel::H200_SPIN_SLEEP,
    }
}

fn percent(p: f64) -> Utilization {
    Utilization::saturating_from_fraction(p / 100.0)
}

/// Seconds as a `Duration`, saturating instead of panicking on values that validation
/// would have refused.
pub fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_the_product_defaults() {
        let s = Settings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.tick(), Duration::from_millis(50));
        assert_eq!(s.launcher_settings().kernel, SpinKernel::Sleep);
        assert_eq!(s.launcher_settings().period, Duration::from_millis(50));
        // The launcher's own defaults agree with the product's.
        assert_eq!(LauncherSettings::default().kernel, s.load.kernel);
        assert_eq!(LauncherSettings::default(), s.launcher_settings());
    }

    #[test]
    fn bursts_beside_holders_unless_a_beside_kernel_is_set() {
        let mut s = Settings::default();
        assert_eq!(s.launcher_settings().beside_kernel, None);
        s.load.beside_kernel_us = 250;
        assert_eq!(
            s.launcher_settings().beside_kernel,
            Some(Duration::from_micros(250))
        );
        s.load.beside_kernel_us = 5;
        assert_eq!(s.validate().unwrap_err().key, "load.beside_kernel_us");
        // The longest kernel may exceed the period: a burst is never longer than its
        // on-time.
        let mut long = Settings::default();
        long.load.max_kernel_us = 1_000_000;
        assert_eq!(long.validate(), Ok(()));
        long.load.max_kernel_us = 1_000_001;
        assert_eq!(long.validate().unwrap_err().key, "load.max_kernel_us");
    }

    #[test]
    fn cross_key_rules_name_the_key_to_change() {
        let tick = Settings {
            tick_ms: 40,
            ..Settings::default()
        };
        assert_eq!(tick.validate().unwrap_err().key, "load.period_ms");
        let mut kernel = Settings::default();
        kernel.load.period_ms = 1;
        kernel.tick_ms = 1;
        kernel.load.beside_kernel_us = 2000;
        assert_eq!(kernel.validate().unwrap_err().key, "load.beside_kernel_us");
        let mut retry = Settings::default();
        retry.probe.retry_initial_s = 500.0;
        let e = retry.validate().unwrap_err();
        assert_eq!(e.key, "probe.retry_max_s");
        assert_eq!(e.reason, "must be between 500 and 86400, got 300");
        // Seen from the key the user set.
        let e = e.blaming("probe.retry_initial_s");
        assert_eq!(e.key, "probe.retry_initial_s");
        assert_eq!(e.reason, "must be at most probe.retry_max_s (300), got 500");
        let tick = tick.validate().unwrap_err().blaming("tick_ms");
        assert_eq!(
            tick.reason,
            "must divide load.period_ms (50 ms): bursts start only at ticks, got 40"
        );
    }

    #[test]
    fn a_window_must_not_be_empty() {
        let mut s = Settings::default();
        let at = TimeOfDay::parse("22:00").unwrap();
        s.schedule.windows.push(WindowSettings {
            start: at,
            end: at,
            target_percent: 0.0,
        });
        assert_eq!(s.validate().unwrap_err().key, "schedule.window");
    }

    #[test]
    fn choices_parse_their_names_and_refuse_others_with_the_list() {
        for m in &Metric::ALL {
            assert_eq!(m.as_str().parse::<Metric>(), Ok(*m));
        }
        assert_eq!(
            "SM".parse::<Metric>(),
            Err("expected \"util\" or \"sm\", got \"SM\"".to_owned())
        );
        assert_eq!(
            "x".parse::<MpsChoice>(),
            Err("expected \"auto\", \"on\" or \"off\", got \"x\"".to_owned())
        );
    }

    #[test]
    fn a_live_update_keeps_restart_keys_and_says_which() {
        let old = Settings::default();
        let mut new = Settings {
            target_percent: 30.0,
            tick_ms: 25,
            ..Settings::default()
        };
        new.load.kernel = SpinKernel::Spin;
        let (applied, kept) = old.live_update(new);
        assert_eq!(applied.target_percent, 30.0);
        assert_eq!(applied.tick_ms, 50);
        assert_eq!(applied.load.kernel, SpinKernel::Sleep);
        assert_eq!(kept, vec!["tick_ms", "load.kernel"]);
    }

    #[test]
    fn mps_auto_follows_the_daemon_and_wins_over_the_policy() {
        let s = Settings::default();
        assert_eq!(s.yield_settings(true).mode, YieldMode::Mps);
        assert_eq!(
            s.yield_settings(false).mode,
            YieldMode::Activity {
                idle_grace: Duration::from_secs(30)
            }
        );
        let mut off = Settings::default();
        off.yielding.mps = MpsChoice::Off;
        off.yielding.policy = YieldPolicyChoice::Presence;
        assert_eq!(off.yield_settings(true).mode, YieldMode::Presence);
    }

    #[test]
    fn sm_shaping_uses_the_device_sm_count_and_the_kernel_power() {
        let mut s = Settings::default();
        assert_eq!(s.shaping(132), Shaping::Fixed);
        s.metric = Metric::Sm;
        match s.shaping(78) {
            Shaping::Sm(sm) => {
                assert_eq!(sm.sm_count, 78);
                assert_eq!(sm.model, PowerModel::H200_SPIN_SLEEP);
            }
            other => panic!("{other:?}"),
        }
    }
}
