//! The named choices of the configuration: controller, yield policy, MPS mode.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `yield.mps`: whether to run beside others under MPS instead of yielding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MpsChoice {
    /// MPS mode when an MPS control daemon is found at start.
    #[default]
    Auto,
    /// Always MPS mode (never yield).
    On,
    /// Never MPS mode: the yield policy applies even under MPS.
    Off,
}

/// The controller, as named in the file and on the command line.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum ControllerChoice {
    /// The PI controller, gpufill's own.
    #[default]
    Pi,
    /// The original tool's 10 s window rule, kept for comparison.
    Window,
}

impl ControllerChoice {
    /// The name used in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerChoice::Pi => "pi",
            ControllerChoice::Window => "window",
        }
    }
}

impl TryFrom<String> for ControllerChoice {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "pi" => Ok(ControllerChoice::Pi),
            "window" => Ok(ControllerChoice::Window),
            _ => Err(format!("expected \"pi\" or \"window\", got {name:?}")),
        }
    }
}

impl fmt::Display for ControllerChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The yield policy, as named in the file. A policy with settings of its own keeps
/// them in `[yield]` (as `activity` does `idle_grace_s`), so existing files keep their
/// meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
#[non_exhaustive]
pub enum YieldPolicyChoice {
    /// `"presence"`: idle while any other compute process is on the GPU.
    #[default]
    Presence,
    /// `"activity"`: idle while another process works, and until it has been quiet
    /// for `idle_grace_s`.
    Activity,
}

impl YieldPolicyChoice {
    /// The name used in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            YieldPolicyChoice::Presence => "presence",
            YieldPolicyChoice::Activity => "activity",
        }
    }
}

impl TryFrom<String> for YieldPolicyChoice {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "presence" => Ok(YieldPolicyChoice::Presence),
            "activity" => Ok(YieldPolicyChoice::Activity),
            _ => Err(format!(
                "expected \"presence\" or \"activity\", got {name:?}"
            )),
        }
    }
}

impl fmt::Display for YieldPolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
