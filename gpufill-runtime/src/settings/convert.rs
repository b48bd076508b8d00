//! The settings as the core's and the launcher's types: each conversion turns the keys
//! of one concern into what acts on them ([`Settings::fill_settings`],
//! [`Settings::yield_settings`], [`Settings::schedule`], [`Settings::retry_settings`],
//! [`Settings::launcher_settings`]). Meant for validated settings; a value out of range
//! is clamped rather than a panic.

use std::time::Duration;

use gpufill_core::{
    Duty, FillSettings, IdleRule, LoopSettings, PowerModel, RetrySettings, Schedule, Shaping,
    SmShaping, Utilization, Width, Window, YieldMode, YieldSettings,
};
use gpufill_cuda::{LauncherSettings, SpinKernel};

use super::defaults::{Metric, MpsChoice, Settings, YieldPolicyChoice};

impl Settings {
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
            max_cost: self.yielding.max_cost_percent / 100.0,
        }
    }

    /// What the loop of a GPU with `sm_count` SMs is built from
    /// ([`gpufill_core::FillLoop::build`]), given whether an MPS control daemon runs:
    /// the one recipe of the runtime's GPUs, the simulated ones, `simulate` and
    /// `bench --sim`.
    pub fn loop_settings(&self, sm_count: u32, mps_running: bool) -> LoopSettings {
        LoopSettings {
            fill: FillSettings {
                shaping: self.shaping(sm_count),
                ..self.fill_settings()
            },
            yielding: self.yield_settings(mps_running),
            controller: self.controller,
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
            beside_live: y.beside_live,
            ignore_pids: y.ignore_pids.clone(),
            ignore_names: y.ignore_names.clone(),
        }
    }

    /// The launcher's settings: period, longest kernel and kernel.
    pub fn launcher_settings(&self) -> LauncherSettings {
        let micros = |us: u64| (us > 0).then(|| Duration::from_micros(us));
        LauncherSettings {
            period: Duration::from_millis(self.load.period_ms),
            max_kernel: Duration::from_micros(self.load.max_kernel_us),
            beside_kernel: micros(self.load.beside_kernel_us),
            kernel: self.load.kernel,
            ..LauncherSettings::default()
        }
    }

    /// The CUDA launcher's settings on a GPU where an MPS control daemon runs (`mps`):
    /// as [`Settings::launcher_settings`], with bursts replayed from graphs of
    /// `load.mps_kernel_us` kernels.
    pub fn launcher_settings_under(&self, mps: bool) -> LauncherSettings {
        let us = self.load.mps_kernel_us;
        LauncherSettings {
            graph_kernel: (mps && us > 0).then(|| Duration::from_micros(us)),
            ..self.launcher_settings()
        }
    }

    /// The loop tick.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }
}

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
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}
