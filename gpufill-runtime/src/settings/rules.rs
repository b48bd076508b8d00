//! The rule of each key ([`Rule`]): its range, or what else it must be, and (feature
//! `serde`) how the file reads and writes a value under it. One rule value tells
//! [`crate::Settings::validate`] what to refuse and the file how to read the key, so
//! that the file's messages are the rules' own; the range messages are worded here,
//! once.

use std::fmt::Display;

#[cfg(feature = "serde")]
use std::marker::PhantomData;

#[cfg(feature = "serde")]
use gpufill_core::TimeOfDay;
#[cfg(feature = "serde")]
use serde::de::{DeserializeSeed, Visitor};
#[cfg(feature = "serde")]
use serde::ser::SerializeStruct;
#[cfg(feature = "serde")]
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

#[cfg(feature = "serde")]
use super::file;
use super::window::WindowSettings;
use crate::gpus::GpuSelector;

/// What a key's value must be, and (feature `serde`) how the file holds it.
pub(crate) trait Rule<T> {
    /// Why `value` is refused, if it is.
    fn problem(&self, value: &T) -> Option<String>;

    /// Reads the value from the file, refusing what can be refused where it is written.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<T, D::Error>;

    /// Writes the value to the file.
    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &T, s: S) -> Result<S::Ok, S::Error>;

    /// Whether the value is left out of the file.
    #[cfg(feature = "serde")]
    fn skip(&self, value: &T) -> bool {
        let _ = value;
        false
    }
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

/// Any boolean.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plain;

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

impl Rule<f64> for Range<f64> {
    fn problem(&self, v: &f64) -> Option<String> {
        self.problem_of(*v)
    }

    /// Any number (`grace_s = 5` too); its range is checked with the other settings.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<f64, D::Error> {
        file::number(d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*value)
    }
}

impl Rule<u64> for Range<u64> {
    fn problem(&self, v: &u64) -> Option<String> {
        self.problem_of(*v)
    }

    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<u64, D::Error> {
        int_in(*self, d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*value)
    }
}

impl Rule<u32> for Range<u64> {
    fn problem(&self, v: &u32) -> Option<String> {
        self.problem_of(u64::from(*v))
    }

    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<u32, D::Error> {
        let v = int_in(*self, d)?;
        u32::try_from(v).map_err(|_| de::Error::custom(range_reason(self.0, self.1, v)))
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(*value)
    }
}

impl Rule<u64> for ZeroOr {
    fn problem(&self, v: &u64) -> Option<String> {
        (*v != 0)
            .then(|| Range(self.0, self.1).problem_of(*v))
            .flatten()
    }

    /// 0 up to the range's top as the file is read; the gap below the range with the
    /// other settings.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<u64, D::Error> {
        int_in(Range(0, self.1), d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*value)
    }
}

/// A choice by name, parsed with its `FromStr` (so the message is its own: `expected
/// "pi" or "window", got "PI"`) and written with its `Display`.
impl<T: gpufill_core::names::Choice> Rule<T> for Named {
    fn problem(&self, _: &T) -> Option<String> {
        None
    }

    /// Any scalar is read, so a wrong type (`mps = true`) hears the names too, with
    /// what it got as the file wrote it.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<T, D::Error> {
        let (text, quoted) = file::scalar(d)?;
        text.parse().map_err(|reason: String| {
            let reason = if quoted {
                reason
            } else {
                format!("{}, got {text}", gpufill_core::names::expected(T::NAMES))
            };
            de::Error::custom(reason)
        })
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }
}

impl Rule<bool> for Plain {
    fn problem(&self, _: &bool) -> Option<String> {
        None
    }

    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<bool, D::Error> {
        bool::deserialize(d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(*value)
    }
}

/// `gpus`: `"all"`, one GPU (index or UUID), or a list of them.
impl Rule<GpuSelector> for Gpus {
    fn problem(&self, v: &GpuSelector) -> Option<String> {
        v.check().err()
    }

    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<GpuSelector, D::Error> {
        file::gpus(d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &GpuSelector, s: S) -> Result<S::Ok, S::Error> {
        file::write_gpus(value, s)
    }
}

impl Rule<Vec<u32>> for Pids {
    fn problem(&self, pids: &Vec<u32>) -> Option<String> {
        pids.iter().find_map(|&pid| PID.problem_of(u64::from(pid)))
    }

    /// Each PID with the range message rather than serde's `expected u32`.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<Vec<u32>, D::Error> {
        struct Pid(u32);
        impl<'de> Deserialize<'de> for Pid {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Rule::<u32>::read(&PID, d).map(Pid)
            }
        }
        let pids = Vec::<Pid>::deserialize(d)?;
        Ok(pids.into_iter().map(|pid| pid.0).collect())
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &Vec<u32>, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }
}

impl Rule<Vec<String>> for Names {
    fn problem(&self, names: &Vec<String>) -> Option<String> {
        let bad = names.iter().any(|n| n.is_empty() || n.contains('/'));
        bad.then(|| "names must be non-empty and without '/' (the last path component)".into())
    }

    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<Vec<String>, D::Error> {
        Vec::deserialize(d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &Vec<String>, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
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
    fn problem(&self, windows: &Vec<WindowSettings>) -> Option<String> {
        windows.iter().find_map(Windows::problem_of)
    }

    /// Each window as `file.rs` reads it: its times and target checked where written.
    #[cfg(feature = "serde")]
    fn read<'de, D: Deserializer<'de>>(&self, d: D) -> Result<Vec<WindowSettings>, D::Error> {
        Vec::deserialize(d)
    }

    #[cfg(feature = "serde")]
    fn write<S: Serializer>(&self, value: &Vec<WindowSettings>, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }

    #[cfg(feature = "serde")]
    fn skip(&self, value: &Vec<WindowSettings>) -> bool {
        value.is_empty()
    }
}

#[cfg(feature = "serde")]
/// A key's value read by its rule: the seed `Table::read_value` hands the map.
pub(crate) struct Read<'a, R, T>(&'a R, PhantomData<T>);

#[cfg(feature = "serde")]
impl<'a, R, T> Read<'a, R, T> {
    pub(crate) fn new(rule: &'a R) -> Self {
        Read(rule, PhantomData)
    }
}

#[cfg(feature = "serde")]
impl<'de, R: Rule<T>, T> DeserializeSeed<'de> for Read<'_, R, T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        self.0.read(d)
    }
}

#[cfg(feature = "serde")]
/// A key's value written by its rule.
pub(crate) struct Written<'a, R, T>(&'a R, &'a T);

#[cfg(feature = "serde")]
impl<'a, R: Rule<T>, T> Written<'a, R, T> {
    pub(crate) fn new(rule: &'a R, value: &'a T) -> Self {
        Written(rule, value)
    }

    /// Writes the value as `key` of `out`, or leaves the key out.
    pub(crate) fn write_as<S: SerializeStruct>(
        &self,
        key: &'static str,
        out: &mut S,
    ) -> Result<(), S::Error> {
        if self.0.skip(self.1) {
            out.skip_field(key)
        } else {
            out.serialize_field(key, self)
        }
    }
}

#[cfg(feature = "serde")]
impl<R: Rule<T>, T> Serialize for Written<'_, R, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.write(self.1, s)
    }
}

#[cfg(feature = "serde")]
/// An integer in `range`; a negative or too large value gets the range message rather
/// than serde's `expected u32`.
pub(crate) fn int_in<'de, D: Deserializer<'de>>(range: Range<u64>, d: D) -> Result<u64, D::Error> {
    struct Int(Range<u64>);
    impl Visitor<'_> for Int {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "an integer between {} and {}", self.0.0, self.0.1)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            match self.0.problem_of(v) {
                None => Ok(v),
                Some(reason) => Err(E::custom(reason)),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::custom(range_reason(self.0.0, self.0.1, v))),
            }
        }
    }
    d.deserialize_u64(Int(range))
}

#[cfg(feature = "serde")]
/// A window as the file has it: every key required, its times and target checked as
/// they are read (with their place in the file).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    #[serde(deserialize_with = "time_of_day")]
    start: TimeOfDay,
    #[serde(deserialize_with = "time_of_day")]
    end: TimeOfDay,
    #[serde(deserialize_with = "window_target")]
    target_percent: f64,
}

#[cfg(feature = "serde")]
fn time_of_day<'de, D: Deserializer<'de>>(d: D) -> Result<TimeOfDay, D::Error> {
    let s = String::deserialize(d)?;
    TimeOfDay::parse(&s).map_err(de::Error::custom)
}

#[cfg(feature = "serde")]
fn window_target<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = file::number(d)?;
    match WINDOW_TARGET.problem_of(v) {
        None => Ok(v),
        Some(reason) => Err(de::Error::custom(reason)),
    }
}

#[cfg(feature = "serde")]
impl<'de> Deserialize<'de> for WindowSettings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = RawWindow::deserialize(d)?;
        let window = WindowSettings {
            start: w.start,
            end: w.end,
            target_percent: w.target_percent,
        };
        if window.start == window.end {
            return Err(de::Error::custom(Windows::empty(&window)));
        }
        Ok(window)
    }
}

#[cfg(feature = "serde")]
impl Serialize for WindowSettings {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("WindowSettings", 3)?;
        out.serialize_field("start", &self.start.to_string())?;
        out.serialize_field("end", &self.end.to_string())?;
        out.serialize_field("target_percent", &self.target_percent)?;
        out.end()
    }
}
