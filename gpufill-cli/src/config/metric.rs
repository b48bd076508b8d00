//! The choices for the `sm` metric: what the loop measures (`metric`) and which kernel
//! the launcher runs (`load.kernel`).

use std::fmt;

use gpufill_core::{PowerModel, Shaping, SmShaping};
use serde::{Deserialize, Serialize};

/// `metric`: what the loop holds at the target.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum MetricChoice {
    /// NVML's utilization (share of time with a kernel resident): duty at a fixed width.
    #[default]
    Util,
    /// GPM's SM utilization (share of SMs busy; Hopper or later): width and duty.
    Sm,
}

impl MetricChoice {
    /// The name used in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricChoice::Util => "util",
            MetricChoice::Sm => "sm",
        }
    }

    /// How the loop turns its controller's output into a load on a GPU with
    /// `sm_count` SMs (read from the device), running `kernel`.
    pub fn shaping(self, sm_count: u32, kernel: KernelChoice) -> Shaping {
        match self {
            MetricChoice::Util => Shaping::Fixed,
            MetricChoice::Sm => Shaping::Sm(SmShaping::with_model(sm_count, kernel.power())),
        }
    }
}

impl TryFrom<String> for MetricChoice {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "util" => Ok(MetricChoice::Util),
            "sm" => Ok(MetricChoice::Sm),
            _ => Err(format!("expected \"util\" or \"sm\", got {name:?}")),
        }
    }
}

impl fmt::Display for MetricChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `load.kernel`: the spin kernel the launcher runs.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum KernelChoice {
    /// `spin`: a pure busy-wait on `%globaltimer`.
    Spin,
    /// `spin_sleep`: the same wait with `__nanosleep(200)` in the loop: the same NVML
    /// and GPM readings for less power (H200 power grid: 122.8 W against 133.2 W with
    /// every SM busy, 121.3 against 121.9 W with one warp), so the default.
    #[default]
    Sleep,
}

impl KernelChoice {
    /// The name used in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            KernelChoice::Spin => "spin",
            KernelChoice::Sleep => "sleep",
        }
    }
}

impl KernelChoice {
    /// The power model the `sm` metric's shaper chooses shapes by for this kernel.
    pub fn power(self) -> PowerModel {
        match self {
            KernelChoice::Spin => PowerModel::H200_SPIN,
            KernelChoice::Sleep => PowerModel::H200_SPIN_SLEEP,
        }
    }
}

impl TryFrom<String> for KernelChoice {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "spin" => Ok(KernelChoice::Spin),
            "sleep" => Ok(KernelChoice::Sleep),
            _ => Err(format!("expected \"spin\" or \"sleep\", got {name:?}")),
        }
    }
}

impl fmt::Display for KernelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::from_toml_str(text, Some(Path::new("gpufill.toml"))).map_err(|e| e.to_string())
    }

    #[test]
    fn metric_and_kernel_parse_and_default_to_util_and_sleep() {
        let config = parse("metric = \"sm\"\n[load]\nkernel = \"spin\"\n").unwrap();
        assert_eq!(config.metric, MetricChoice::Sm);
        assert_eq!(config.load.kernel, KernelChoice::Spin);
        let config = parse("").unwrap();
        assert_eq!(config.metric, MetricChoice::Util);
        assert_eq!(config.load.kernel, KernelChoice::Sleep);
    }

    #[test]
    fn unknown_metric_and_kernel_names_are_refused_with_position_and_key() {
        assert_eq!(
            parse("metric = \"SM\"").unwrap_err(),
            "gpufill.toml:1:10: metric: expected \"util\" or \"sm\", got \"SM\""
        );
        assert_eq!(
            parse("[load]\nkernel = \"nap\"").unwrap_err(),
            "gpufill.toml:2:10: load.kernel: expected \"spin\" or \"sleep\", got \"nap\""
        );
    }

    #[test]
    fn sm_metric_shapes_by_the_device_sm_count_and_the_kernel_power() {
        assert_eq!(
            MetricChoice::Util.shaping(132, KernelChoice::Spin),
            Shaping::Fixed
        );
        match MetricChoice::Sm.shaping(78, KernelChoice::Sleep) {
            Shaping::Sm(sm) => {
                assert_eq!(sm.sm_count, 78);
                assert_eq!(sm.model, PowerModel::H200_SPIN_SLEEP);
            }
            other => panic!("{other:?}"),
        }
    }
}
