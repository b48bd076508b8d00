//! The rule of each key ([`Rule`]): its range, or what else it must be. The same rule
//! value tells [`crate::Settings::validate`] what to refuse and (feature `serde`) the
//! file how to read the key; the range messages are worded here, once.

use std::fmt::Display;

use super::window::WindowSettings;
use crate::gpus::GpuSelector;

/// What a key's value must be.
pub(crate) trait Rule<T> {
    /// Why `value`, the value of `key`, is refused: `(key, reason)`; a table names its
    /// own key.
    fn problem(&self, key: &'static str, value: &T) -> Option<(&'static str, String)>;
}

/// A number in `[min, max]` (integers read out of range are refused as the file is
/// read, decimals when the settings are validated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Range<N>(pub N, pub N);

/// 0, or an integer in `[min, max]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ZeroOr(pub u64, pub u64);

/// Any value of its type, read by the name it goes by (`"pi"`, `"sleep"`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Named;

/// Any value of its type, read as serde reads it (a boolean, a list of names).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plain;

/// A table of its own ([`crate::settings::table`]), checked key by key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Table;

/// `"all"` or a list of GPUs, each once ([`GpuSelector::check`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gpus;

/// PIDs, each in `[1, 4294967295]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pids;

/// Process names: the last path component, so non-empty and without `/`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Names;

/// Daily windows, each `[start, end)` with `start != end` and a target in `[0, 100]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows;

/// The bounds of a PID.
pub(crate) const PID: Range<u64> = Range(1, u32::MAX as u64);

/// `must be between MIN and MAX, got V`: the range message of every key.
pub(crate) fn range_reason(min: impl Display, max: impl Display, got: impl Display) -> String {
    format!("must be between {min} and {max}, got {got}")
}

impl<N: PartialOrd + Display + Copy> Range<N> {
    /// The range message when `v` is outside the range (a NaN is: `contains` is false
    /// for it, and infinities fall outside any finite range).
    pub(crate) fn problem_of(&self, v: N) -> Option<String> {
        (!(self.0..=self.1).contains(&v)).then(|| range_reason(self.0, self.1, v))
    }
}

fn keyed(key: &'static str, reason: Option<String>) -> Option<(&'static str, String)> {
    reason.map(|reason| (key, reason))
}

impl Rule<u64> for Range<u64> {
    fn problem(&self, key: &'static str, v: &u64) -> Option<(&'static str, String)> {
        keyed(key, self.problem_of(*v))
    }
}

impl Rule<u32> for Range<u64> {
    fn problem(&self, key: &'static str, v: &u32) -> Option<(&'static str, String)> {
        keyed(key, self.problem_of(u64::from(*v)))
    }
}

impl Rule<f64> for Range<f64> {
    fn problem(&self, key: &'static str, v: &f64) -> Option<(&'static str, String)> {
        keyed(key, self.problem_of(*v))
    }
}

impl Rule<u64> for ZeroOr {
    fn problem(&self, key: &'static str, v: &u64) -> Option<(&'static str, String)> {
        let range = Range(self.0, self.1);
        keyed(key, (*v != 0).then(|| range.problem_of(*v)).flatten())
    }
}

impl<T> Rule<T> for Named {
    fn problem(&self, _: &'static str, _: &T) -> Option<(&'static str, String)> {
        None
    }
}

impl<T> Rule<T> for Plain {
    fn problem(&self, _: &'static str, _: &T) -> Option<(&'static str, String)> {
        None
    }
}

/// What a table of settings answers for its keys.
pub(crate) trait Checked {
    /// The first key whose value its rule refuses, with why.
    fn first_problem(&self) -> Option<(&'static str, String)>;
}

impl<T: Checked> Rule<T> for Table {
    fn problem(&self, _: &'static str, table: &T) -> Option<(&'static str, String)> {
        table.first_problem()
    }
}

impl Rule<GpuSelector> for Gpus {
    fn problem(&self, key: &'static str, v: &GpuSelector) -> Option<(&'static str, String)> {
        keyed(key, v.check().err())
    }
}

impl Rule<Vec<u32>> for Pids {
    fn problem(&self, key: &'static str, pids: &Vec<u32>) -> Option<(&'static str, String)> {
        keyed(
            key,
            pids.iter().find_map(|&pid| PID.problem_of(u64::from(pid))),
        )
    }
}

impl Rule<Vec<String>> for Names {
    fn problem(&self, key: &'static str, names: &Vec<String>) -> Option<(&'static str, String)> {
        let bad = names.iter().any(|n| n.is_empty() || n.contains('/'));
        keyed(
            key,
            bad.then(|| "names must be non-empty and without '/' (the last path component)".into()),
        )
    }
}

/// The bounds of a window's `target_percent`.
pub(crate) const WINDOW_TARGET: Range<f64> = Range(0.0, 100.0);

impl Windows {
    /// Why `window` is refused, if it is.
    fn problem_of(window: &WindowSettings) -> Option<String> {
        if window.start == window.end {
            return Some(Windows::empty(window));
        }
        WINDOW_TARGET
            .problem_of(window.target_percent)
            .map(|r| format!("target_percent: {r}"))
    }

    /// Why a window with `start == end` is refused.
    pub(crate) fn empty(window: &WindowSettings) -> String {
        format!(
            "start and end must differ, both are {} (the window would be empty)",
            window.start
        )
    }
}

impl Rule<Vec<WindowSettings>> for Windows {
    fn problem(
        &self,
        key: &'static str,
        windows: &Vec<WindowSettings>,
    ) -> Option<(&'static str, String)> {
        keyed(key, windows.iter().find_map(Windows::problem_of))
    }
}
