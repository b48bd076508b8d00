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
//! [`Config::tick`], [`Config::period`], [`Config::max_kernel`].

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use gpufill_core::{
    ControllerKind, Duty, FillSettings, Utilization, Width, YieldMode, YieldSettings,
};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use toml::de::{DeTable, DeValue};

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
    /// Loop tick in milliseconds, `1..=1000`: how often processes and utilization are read.
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target_percent: 50.0,
            gpus: GpuSelector::All,
            controller: ControllerChoice::Pi,
            tick_ms: 10,
            load: LoadConfig::default(),
            yielding: YieldConfig::default(),
            probe: ProbeConfig::default(),
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
    /// Launch period in milliseconds, `1..=1000`.
    #[serde(deserialize_with = "int_in::<_, _, PERIOD_MS_MIN, PERIOD_MS_MAX>")]
    pub period_ms: u64,
    /// Longest single kernel in microseconds, `10..=100000`, and at most the period.
    #[serde(deserialize_with = "int_in::<_, _, KERNEL_US_MIN, KERNEL_US_MAX>")]
    pub max_kernel_us: u64,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            width_blocks: 1,
            max_duty_percent: 100.0,
            period_ms: 20,
            max_kernel_us: 2000,
        }
    }
}

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
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig { fault_hold_s: 2.0 }
    }
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

/// The yield policy, as named in the file.
///
/// Only `presence` exists today. A policy with settings of its own (such as a future
/// `activity`, which would yield on foreign SM activity rather than presence) adds a
/// variant here and its keys to `[yield]`, prefixed with its name, so existing files
/// keep their meaning.
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

/// Which GPUs to fill: `"all"`, or a non-empty list without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum GpuSelector {
    /// Every GPU NVML lists.
    #[default]
    All,
    /// These GPUs, in this order.
    List(Vec<GpuId>),
}

/// One GPU, by NVML index or by UUID.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuId {
    /// The NVML index (as `nvidia-smi` numbers GPUs).
    Index(u32),
    /// A GPU or MIG instance UUID: `GPU-...` or `MIG-...`.
    Uuid(String),
}

impl GpuId {
    /// A GPU from an index given as a signed integer, as TOML integers are.
    ///
    /// # Errors
    /// A message when the index is negative or larger than `u32::MAX`.
    pub fn from_index(index: i64) -> Result<GpuId, String> {
        if index < 0 {
            return Err(format!("a GPU index must not be negative, got {index}"));
        }
        u32::try_from(index)
            .map(GpuId::Index)
            .map_err(|_| format!("a GPU index must be at most {}, got {index}", u32::MAX))
    }

    /// A GPU from a UUID string, which must start with `GPU-` or `MIG-`, continue with
    /// at least one character, and hold no spaces or commas.
    ///
    /// # Errors
    /// A message naming the string otherwise.
    pub fn from_uuid(uuid: &str) -> Result<GpuId, String> {
        let rest = uuid
            .strip_prefix("GPU-")
            .or_else(|| uuid.strip_prefix("MIG-"));
        match rest {
            Some(rest)
                if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_graphic() && c != ',') =>
            {
                Ok(GpuId::Uuid(uuid.to_owned()))
            }
            _ => Err(format!(
                "expected \"all\", a GPU index or a UUID starting with GPU- or MIG-, got {uuid:?}"
            )),
        }
    }

    /// One item of a `--gpus` list: an index or a UUID.
    fn parse_item(item: &str) -> Result<GpuId, String> {
        if item.is_empty() {
            return Err("empty item in the GPU list".to_owned());
        }
        if let Ok(index) = item.parse::<i64>() {
            return GpuId::from_index(index);
        }
        let digits = item.strip_prefix(['-', '+']).unwrap_or(item);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "a GPU index must be at most {}, got {item}",
                u32::MAX
            ));
        }
        GpuId::from_uuid(item)
    }
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuId::Index(index) => write!(f, "{index}"),
            GpuId::Uuid(uuid) => f.write_str(uuid),
        }
    }
}

impl GpuSelector {
    /// A list selector; `ids` must be non-empty and without duplicates.
    ///
    /// # Errors
    /// A message when the list is empty or names a GPU twice.
    pub fn from_list(ids: Vec<GpuId>) -> Result<GpuSelector, String> {
        GpuSelector::check_list(&ids)?;
        Ok(GpuSelector::List(ids))
    }

    /// Parses the value of a `--gpus` flag: `all`, or a comma-separated list of indices
    /// and UUIDs (`0,1,GPU-5f2c...`), with the same rules as the file.
    ///
    /// # Errors
    /// A message naming what is wrong, for the flag parser to print.
    pub fn parse_flag(s: &str) -> Result<GpuSelector, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(GpuSelector::All);
        }
        let ids = s
            .split(',')
            .map(|item| GpuId::parse_item(item.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        GpuSelector::from_list(ids)
    }

    fn check(&self) -> Result<(), String> {
        match self {
            GpuSelector::All => Ok(()),
            GpuSelector::List(ids) => GpuSelector::check_list(ids),
        }
    }

    fn check_list(ids: &[GpuId]) -> Result<(), String> {
        if ids.is_empty() {
            return Err("the GPU list is empty; use \"all\" or name at least one GPU".to_owned());
        }
        for (i, id) in ids.iter().enumerate() {
            if let GpuId::Uuid(uuid) = id {
                GpuId::from_uuid(uuid)?;
            }
            if ids[..i].contains(id) {
                return Err(format!("GPU {id} is listed twice"));
            }
        }
        Ok(())
    }
}

impl FromStr for GpuSelector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        GpuSelector::parse_flag(s)
    }
}

impl fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuSelector::All => f.write_str("all"),
            GpuSelector::List(ids) => {
                for (i, id) in ids.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{id}")?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for GpuId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GpuId::Index(index) => s.serialize_u32(*index),
            GpuId::Uuid(uuid) => s.serialize_str(uuid),
        }
    }
}

impl Serialize for GpuSelector {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GpuSelector::All => s.serialize_str("all"),
            GpuSelector::List(ids) => s.collect_seq(ids),
        }
    }
}

impl<'de> Deserialize<'de> for GpuId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GpuVisitor { whole: false })
            .and_then(|selector| match selector {
                GpuSelector::List(mut ids) if ids.len() == 1 => Ok(ids.remove(0)),
                _ => Err(de::Error::custom("\"all\" cannot be part of a GPU list")),
            })
    }
}

impl<'de> Deserialize<'de> for GpuSelector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GpuVisitor { whole: true })
    }
}

/// Reads `"all"`, a single GPU, or (when `whole`) a list of GPUs. A single GPU becomes
/// a list of one, so `gpus = 0` means what `--gpus 0` means.
struct GpuVisitor {
    whole: bool,
}

impl<'de> Visitor<'de> for GpuVisitor {
    type Value = GpuSelector;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.whole {
            f.write_str("\"all\" or a list of GPU indices and UUIDs")
        } else {
            f.write_str("a GPU index or UUID")
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<GpuSelector, E> {
        let id = GpuId::from_index(v).map_err(E::custom)?;
        Ok(GpuSelector::List(vec![id]))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<GpuSelector, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => Err(E::custom(format!(
                "a GPU index must be at most {}, got {v}",
                u32::MAX
            ))),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<GpuSelector, E> {
        if v == "all" {
            return Ok(GpuSelector::All);
        }
        let id = GpuId::from_uuid(v).map_err(E::custom)?;
        Ok(GpuSelector::List(vec![id]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GpuSelector, A::Error> {
        if !self.whole {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let mut ids = Vec::new();
        while let Some(id) = seq.next_element::<GpuId>()? {
            ids.push(id);
        }
        GpuSelector::from_list(ids).map_err(de::Error::custom)
    }
}

/// A table, and only a table: serde's derived structs also read sequences by position,
/// which would make `probe = [1]` (or `[[probe]]`) mean `fault_hold_s = 1`.
fn table<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct TableOnly<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for TableOnly<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(TableOnly(PhantomData))
}

/// A list of PIDs, each with the range message rather than serde's `expected u32`.
fn pids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(transparent)]
    struct Pid(#[serde(deserialize_with = "int_in::<_, _, PID_MIN, PID_MAX>")] u32);
    let pids = Vec::<Pid>::deserialize(d)?;
    Ok(pids.into_iter().map(|pid| pid.0).collect())
}

/// An `f64` field that also takes TOML integers (`grace_s = 5`), with a plain message.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Number;
    impl Visitor<'_> for Number {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
    }
    d.deserialize_f64(Number)
}

/// An integer field in `MIN..=MAX`; a negative or too large value gets the range
/// message rather than serde's `expected u32`.
fn int_in<'de, D, T, const MIN: u64, const MAX: u64>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    struct Int<const MIN: u64, const MAX: u64>;
    impl<const MIN: u64, const MAX: u64> Visitor<'_> for Int<MIN, MAX> {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "an integer between {MIN} and {MAX}")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            match int_problem(v, MIN, MAX) {
                None => Ok(v),
                Some(reason) => Err(E::custom(reason)),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::custom(range_reason(MIN, MAX, v))),
            }
        }
    }
    let v = d.deserialize_u64(Int::<MIN, MAX>)?;
    T::try_from(v).map_err(|_| de::Error::custom(range_reason(MIN, MAX, v)))
}

fn range_reason(min: impl fmt::Display, max: impl fmt::Display, got: impl fmt::Display) -> String {
    format!("must be between {min} and {max}, got {got}")
}

fn int_problem(v: u64, min: u64, max: u64) -> Option<String> {
    (!(min..=max).contains(&v)).then(|| range_reason(min, max, v))
}

fn float_problem(v: f64, min: f64, max: f64) -> Option<String> {
    // `contains` is false for NaN; infinities fall outside any finite range.
    (!(min..=max).contains(&v)).then(|| range_reason(min, max, v))
}

/// A place in the text: 1-based line, 1-based column in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `text`; an offset past the end or inside a
    /// character is moved back to the nearest character boundary.
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a configuration was refused. Every message names the file (when there is one),
/// the position and key (when known), and the reason: `file:line:column: key: reason`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read; the message carries the OS reason.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// The text is not TOML (or not UTF-8).
    #[error("{}", render(origin.as_deref(), *position, None, reason))]
    Syntax {
        /// The file, if the text came from one.
        origin: Option<PathBuf>,
        /// Where the parser stopped.
        position: Option<Position>,
        /// What the parser expected.
        reason: String,
    },
    /// The text is TOML, but a key is unknown, a value has the wrong type, or a value
    /// is out of range.
    #[error("{}", render(origin.as_deref(), *position, key.as_deref(), reason))]
    Invalid {
        /// The file, if the value came from one.
        origin: Option<PathBuf>,
        /// Where the value is in the file, if it came from the file.
        position: Option<Position>,
        /// The dotted key, e.g. `load.width_blocks`.
        key: Option<String>,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    /// The dotted key the error is about, if any (for the binary to name its flag).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => key.as_deref(),
            _ => None,
        }
    }

    /// Where in the text the error is, if known.
    pub fn position(&self) -> Option<Position> {
        match self {
            ConfigError::Syntax { position, .. } | ConfigError::Invalid { position, .. } => {
                *position
            }
            ConfigError::Read { .. } => None,
        }
    }

    fn invalid(origin: Option<&Path>, key: &str, reason: String) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.map(Path::to_path_buf),
            position: None,
            key: Some(key.to_owned()),
            reason,
        }
    }
}

fn render(
    origin: Option<&Path>,
    position: Option<Position>,
    key: Option<&str>,
    reason: &str,
) -> String {
    let place = match (origin, position) {
        (Some(path), Some(pos)) => format!("{}:{pos}", path.display()),
        (Some(path), None) => path.display().to_string(),
        (None, Some(pos)) => format!("line {}, column {}", pos.line, pos.column),
        (None, None) => String::new(),
    };
    [place.as_str(), key.unwrap_or(""), reason]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
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
        ];
        checks
            .into_iter()
            .find_map(|(key, problem)| problem.map(|reason| (key, reason)))
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
        set(&mut self.tick_ms, &flags.tick_ms);
        set(&mut self.load.width_blocks, &flags.width_blocks);
        set(&mut self.load.max_duty_percent, &flags.max_duty_percent);
        set(&mut self.load.period_ms, &flags.period_ms);
        set(&mut self.load.max_kernel_us, &flags.max_kernel_us);
        set(&mut self.yielding.grace_s, &flags.grace_s);
        set(&mut self.probe.fault_hold_s, &flags.fault_hold_s);
    }

    /// The fill loop's settings. Meant for a validated configuration; out-of-range
    /// values are clamped rather than panicking.
    pub fn fill_settings(&self) -> FillSettings {
        FillSettings {
            target: Utilization::saturating_from_fraction(self.target_percent / 100.0),
            width: Width::blocks(self.load.width_blocks).unwrap_or(Width::ONE_WARP),
            max_duty: Duty::clamped(self.load.max_duty_percent / 100.0),
            fault_hold: seconds(self.probe.fault_hold_s),
            release_after: self
                .yielding
                .release_context
                .then(|| seconds(self.yielding.release_after_s)),
        }
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
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(if s > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// The dotted key whose key or value covers byte `offset`, deepest first.
fn key_at(table: &DeTable<'_>, offset: usize) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        let name = key.get_ref();
        if let Some(inner) = nested_key_at(value.get_ref(), offset) {
            return Some(format!("{name}.{inner}"));
        }
        (contains(&key.span(), offset) || contains(&value.span(), offset)).then(|| name.to_string())
    })
}

fn nested_key_at(value: &DeValue<'_>, offset: usize) -> Option<String> {
    match value {
        DeValue::Table(table) => key_at(table, offset),
        DeValue::Array(items) => items
            .iter()
            .find_map(|item| nested_key_at(item.get_ref(), offset)),
        _ => None,
    }
}

/// The span of the value at a dotted key, if the document has it.
fn span_of_key(table: &DeTable<'_>, dotted: &str) -> Option<Range<usize>> {
    let (first, rest) = match dotted.split_once('.') {
        Some((first, rest)) => (first, Some(rest)),
        None => (dotted, None),
    };
    let value = table.get(first)?;
    match (rest, value.get_ref()) {
        (None, _) => Some(value.span()),
        (Some(rest), DeValue::Table(inner)) => span_of_key(inner, rest),
        (Some(_), _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../gpufill.example.toml");

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(text, Some(Path::new("gpufill.toml")))
    }

    fn error(text: &str) -> ConfigError {
        match parse(text) {
            Ok(config) => panic!("{text:?} was accepted as {config:?}"),
            Err(e) => e,
        }
    }

    fn gpus(text: &str) -> Result<GpuSelector, ConfigError> {
        parse(&format!("gpus = {text}")).map(|config| config.gpus)
    }

    fn list(ids: &[GpuId]) -> GpuSelector {
        GpuSelector::List(ids.to_vec())
    }

    fn uuid(s: &str) -> GpuId {
        GpuId::Uuid(s.to_owned())
    }

    #[test]
    fn shipped_example_equals_the_defaults() {
        assert_eq!(parse(EXAMPLE).unwrap(), Config::default());
    }

    #[test]
    fn shipped_example_lists_every_key_with_its_default() {
        let example: toml::Table = toml::from_str(EXAMPLE).unwrap();
        let rendered: toml::Table = toml::from_str(&Config::default().to_toml_string()).unwrap();
        assert_eq!(example, rendered);
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        assert_eq!(parse("# nothing\n\n[load]\n").unwrap(), Config::default());
    }

    #[test]
    fn rendered_settings_parse_back_equal() {
        let mut config = Config::default();
        config.apply(&Overrides {
            target_percent: Some(37.25),
            gpus: Some(list(&[GpuId::Index(2), uuid("GPU-5f2c0a1b")])),
            controller: Some(ControllerChoice::Window),
            tick_ms: Some(50),
            width_blocks: Some(132),
            max_duty_percent: Some(80.5),
            period_ms: Some(100),
            max_kernel_us: Some(100_000),
            grace_s: Some(0.25),
            fault_hold_s: Some(0.0),
        });
        config.yielding.ignore_pids = vec![1, 4242];
        for config in [Config::default(), config] {
            assert_eq!(parse(&config.to_toml_string()).unwrap(), config);
        }
    }

    #[test]
    fn integer_values_are_accepted_for_decimal_keys() {
        let config = parse("target_percent = 40\n[yield]\ngrace_s = 0\n").unwrap();
        assert_eq!(config.target_percent, 40.0);
        assert_eq!(config.yielding.grace_s, 0.0);
    }

    /// (key, TOML prefix for its table, values just inside, values just outside).
    const BOUNDS: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "target_percent",
            "",
            &["0", "100", "0.0"],
            &["-0.001", "100.001"],
        ),
        ("tick_ms", "", &["1", "1000"], &["0", "1001", "-1"]),
        (
            "load.width_blocks",
            "[load]\n",
            &["1", "65535"],
            &["0", "65536", "-1"],
        ),
        (
            "load.max_duty_percent",
            "[load]\n",
            &["0", "100"],
            &["-0.1", "100.1"],
        ),
        (
            "load.period_ms",
            "[load]\nmax_kernel_us = 10\n",
            &["1", "1000"],
            &["0", "1001"],
        ),
        (
            "load.max_kernel_us",
            "[load]\nperiod_ms = 1000\n",
            &["10", "100000"],
            &["9", "100001"],
        ),
        (
            "load.max_kernel_us",
            "[load]\nperiod_ms = 1\n",
            &["1000"],
            &["1001"],
        ),
        (
            "yield.grace_s",
            "[yield]\n",
            &["0", "86400"],
            &["-0.001", "86400.001"],
        ),
        (
            "probe.fault_hold_s",
            "[probe]\n",
            &["0", "3600"],
            &["-0.1", "3600.1"],
        ),
        (
            "yield.ignore_pids",
            "[yield]\n",
            &["[1, 4294967295]"],
            &["[0]", "[-5]", "[4294967296]"],
        ),
    ];

    fn with_value(key: &str, prefix: &str, value: &str) -> String {
        let name = key.rsplit('.').next().unwrap();
        format!("{prefix}{name} = {value}\n")
    }

    #[test]
    fn values_just_inside_every_range_are_accepted() {
        for (key, prefix, inside, _) in BOUNDS {
            for value in *inside {
                let text = with_value(key, prefix, value);
                assert!(parse(&text).is_ok(), "{text:?}: {}", error(&text));
            }
        }
    }

    #[test]
    fn values_just_outside_every_range_are_refused_naming_the_key() {
        for (key, prefix, _, outside) in BOUNDS {
            for value in *outside {
                let e = error(&with_value(key, prefix, value));
                assert_eq!(e.key(), Some(*key), "{e}");
                assert!(e.to_string().contains(&format!(": {key}: ")), "{e}");
                assert!(e.position().is_some(), "{e}");
            }
        }
    }

    #[test]
    fn nan_and_infinities_are_refused() {
        for value in ["nan", "+nan", "-nan", "inf", "+inf", "-inf"] {
            let e = error(&format!("target_percent = {value}"));
            assert_eq!(e.key(), Some("target_percent"), "{e}");
            let e = error(&format!("[yield]\ngrace_s = {value}"));
            assert_eq!(e.key(), Some("yield.grace_s"), "{e}");
        }
        let mut config = Config::default();
        config.probe.fault_hold_s = f64::INFINITY;
        assert_eq!(
            config.validate(None).unwrap_err().key(),
            Some("probe.fault_hold_s")
        );
    }

    #[test]
    fn a_kernel_longer_than_the_period_is_refused() {
        let e = error("[load]\nperiod_ms = 1\nmax_kernel_us = 1001\n");
        assert_eq!(
            e.to_string(),
            "gpufill.toml:3:17: load.max_kernel_us: must not exceed load.period_ms \
             (1 ms = 1000 us), got 1001"
        );
        // The default kernel (2000 us) no longer fits: no position, as the file lacks it.
        let e = error("[load]\nperiod_ms = 1\n");
        assert_eq!(e.key(), Some("load.max_kernel_us"));
        assert_eq!(e.position(), None);
    }

    #[test]
    fn wrong_types_are_refused_naming_the_key() {
        for (text, key) in [
            ("target_percent = \"50\"", "target_percent"),
            ("tick_ms = 1.5", "tick_ms"),
            ("controller = 1", "controller"),
            ("load = 5", "load"),
            ("[[load]]\nwidth_blocks = 1", "load"),
            ("[load]\nwidth_blocks = true", "load.width_blocks"),
            ("[yield]\nignore_pids = 5", "yield.ignore_pids"),
            ("[yield]\nignore_pids = [\"a\"]", "yield.ignore_pids"),
            ("[probe]\nfault_hold_s = 1979-05-27", "probe.fault_hold_s"),
            ("probe = [1]", "probe"),
        ] {
            let e = error(text);
            assert_eq!(e.key(), Some(key), "{text:?}: {e}");
            assert!(e.position().is_some(), "{e}");
        }
    }

    #[test]
    fn unknown_names_for_controller_and_policy_are_refused() {
        let e = error("controller = \"PI\"");
        assert_eq!(
            e.to_string(),
            "gpufill.toml:1:14: controller: expected \"pi\" or \"window\", got \"PI\""
        );
        let flag = <ControllerChoice as clap::ValueEnum>::from_str("window", false);
        assert_eq!(flag, Ok(ControllerChoice::Window));
        let e = error("[yield]\npolicy = \"never\"");
        assert_eq!(e.key(), Some("yield.policy"));
        assert_eq!(
            parse("controller = \"window\"").unwrap().controller,
            ControllerChoice::Window
        );
    }

    #[test]
    fn unknown_keys_are_refused_at_the_top_level_and_in_tables() {
        for (text, key) in [
            ("colour = 1", "colour"),
            ("[extra]\n", "extra"),
            ("[load]\nspeed = 1", "load.speed"),
            ("[yield]\ngrace_ms = 1", "yield.grace_ms"),
            ("[probe]\nfault_hold = 1", "probe.fault_hold"),
            ("load.widht_blocks = 2", "load.widht_blocks"),
        ] {
            let e = error(text);
            assert_eq!(e.key(), Some(key), "{text:?}: {e}");
            assert!(e.to_string().contains("unknown field"), "{e}");
        }
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        let e = error("target_percent = 50\n\n[load\n");
        assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
        assert_eq!(e.position(), Some(Position { line: 3, column: 6 }));
        assert!(e.to_string().starts_with("gpufill.toml:3:6: "), "{e}");
        let e = error("tick_ms = 10\ntick_ms = 20\n");
        assert_eq!(e.position().map(|p| p.line), Some(2), "{e}");
        assert!(error("a = \"unterminated").position().is_some());
    }

    #[test]
    fn error_messages_read_file_line_column_key_reason() {
        assert_eq!(
            error("[load]\nwidth_blocks = 0\n").to_string(),
            "gpufill.toml:2:16: load.width_blocks: must be between 1 and 65535, got 0"
        );
        assert_eq!(
            error("target_percent = \"x\"").to_string(),
            "gpufill.toml:1:18: target_percent: invalid type: string \"x\", expected a number"
        );
        let e = Config::from_toml_str("tick_ms = 0", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1, column 11: tick_ms: must be between 1 and 1000, got 0"
        );
        let mut config = Config::default();
        config.load.width_blocks = 0;
        let e = config
            .validate(Some(Path::new("gpufill.toml")))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "gpufill.toml: load.width_blocks: must be between 1 and 65535, got 0"
        );
        let e = config.validate(None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "load.width_blocks: must be between 1 and 65535, got 0"
        );
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let e = error("# é\n[load] # ü\nwidth_blocks = 0 # ß\n");
        assert_eq!(
            e.position(),
            Some(Position {
                line: 3,
                column: 16
            })
        );
        let e = error("load = { \"é\" = 1, width_blocks = 0 }");
        assert_eq!(
            e.position(),
            Some(Position {
                line: 1,
                column: 34
            })
        );
    }

    #[test]
    fn gpus_accept_all_indices_and_uuids() {
        assert_eq!(gpus("\"all\"").unwrap(), GpuSelector::All);
        assert_eq!(
            gpus("[0, 2, \"GPU-5f2c0a1b-aaaa\"]").unwrap(),
            list(&[GpuId::Index(0), GpuId::Index(2), uuid("GPU-5f2c0a1b-aaaa")])
        );
        assert_eq!(gpus("[\"MIG-1234\"]").unwrap(), list(&[uuid("MIG-1234")]));
        assert_eq!(gpus("3").unwrap(), list(&[GpuId::Index(3)]));
        assert_eq!(gpus("\"GPU-abc\"").unwrap(), list(&[uuid("GPU-abc")]));
        assert_eq!(
            gpus("[4294967295]").unwrap(),
            list(&[GpuId::Index(u32::MAX)])
        );
    }

    #[test]
    fn gpus_refuse_other_strings_negatives_empty_lists_and_duplicates() {
        for (text, reason) in [
            ("\"none\"", "got \"none\""),
            ("\"ALL\"", "got \"ALL\""),
            ("\"gpu-abc\"", "got \"gpu-abc\""),
            ("\"GPU-\"", "got \"GPU-\""),
            ("[\"GPU-a b\"]", "got \"GPU-a b\""),
            ("[0, \"1\"]", "got \"1\""),
            ("[\"all\"]", "\"all\" cannot be part of a GPU list"),
            ("[-1]", "must not be negative, got -1"),
            ("-1", "must not be negative, got -1"),
            ("[4294967296]", "must be at most 4294967295"),
            ("[]", "the GPU list is empty"),
            ("[0, 1, 0]", "GPU 0 is listed twice"),
            ("[\"GPU-a\", \"GPU-a\"]", "GPU GPU-a is listed twice"),
            ("[1.5]", "expected a GPU index or UUID"),
            ("[[1]]", "expected a GPU index or UUID"),
            ("true", "expected \"all\" or a list"),
            ("{ a = 1 }", "expected \"all\" or a list"),
        ] {
            let e = gpus(text).unwrap_err();
            assert_eq!(e.key(), Some("gpus"), "{text}: {e}");
            assert!(e.to_string().contains(reason), "{text}: {e}");
        }
    }

    #[test]
    fn gpus_flag_follows_the_same_rules() {
        assert_eq!(GpuSelector::parse_flag("all"), Ok(GpuSelector::All));
        assert_eq!(
            GpuSelector::parse_flag(" 0, 1 ,GPU-abc"),
            Ok(list(&[GpuId::Index(0), GpuId::Index(1), uuid("GPU-abc")]))
        );
        assert_eq!("MIG-x".parse(), Ok(list(&[uuid("MIG-x")])));
        for (flag, reason) in [
            ("", "empty item"),
            ("0,,1", "empty item"),
            ("0,", "empty item"),
            ("-1", "must not be negative"),
            ("99999999999999999999", "must be at most"),
            ("x", "got \"x\""),
            ("all,0", "got \"all\""),
            ("0,0", "GPU 0 is listed twice"),
        ] {
            let e = GpuSelector::parse_flag(flag).unwrap_err();
            assert!(e.contains(reason), "{flag:?}: {e}");
        }
    }

    #[test]
    fn gpus_render_back_as_written() {
        let selector = list(&[GpuId::Index(0), uuid("GPU-abc")]);
        assert_eq!(selector.to_string(), "0,GPU-abc");
        assert_eq!(GpuSelector::parse_flag(&selector.to_string()), Ok(selector));
        assert_eq!(GpuSelector::All.to_string(), "all");
    }

    #[test]
    fn validate_refuses_gpu_lists_built_in_code() {
        let mut config = Config::default();
        for bad in [
            list(&[]),
            list(&[uuid("nope")]),
            list(&[GpuId::Index(1), GpuId::Index(1)]),
        ] {
            config.gpus = bad;
            assert_eq!(config.validate(None).unwrap_err().key(), Some("gpus"));
        }
    }

    #[test]
    fn flags_override_file_values() {
        let mut config =
            parse("target_percent = 30\ntick_ms = 20\n[load]\nperiod_ms = 50\n").unwrap();
        config.apply(&Overrides {
            target_percent: Some(70.0),
            gpus: Some(list(&[GpuId::Index(1)])),
            max_kernel_us: Some(5000),
            ..Overrides::default()
        });
        config.validate(None).unwrap();
        assert_eq!(config.target_percent, 70.0);
        assert_eq!(config.gpus, list(&[GpuId::Index(1)]));
        assert_eq!(
            config.tick_ms, 20,
            "a value without a flag keeps the file's"
        );
        assert_eq!(config.period(), Duration::from_millis(50));
        assert_eq!(config.max_kernel(), Duration::from_micros(5000));
    }

    #[test]
    fn flags_are_validated_by_the_same_rules() {
        let mut config = Config::default();
        config.apply(&Overrides {
            grace_s: Some(-1.0),
            ..Overrides::default()
        });
        let e = config.validate(None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "yield.grace_s: must be between 0 and 86400, got -1"
        );
    }

    #[test]
    fn defaults_resolve_to_the_core_defaults() {
        let config = Config::default();
        assert_eq!(config.fill_settings(), FillSettings::default());
        assert_eq!(config.yield_settings(), YieldSettings::default());
        assert_eq!(config.controller_kind(), ControllerKind::default());
        assert_eq!(config.yield_policy(), YieldPolicyChoice::Presence);
        assert_eq!(config.tick(), Duration::from_millis(10));
        assert_eq!(config.period(), Duration::from_millis(20));
        assert_eq!(config.max_kernel(), Duration::from_micros(2000));
    }

    #[test]
    fn settings_resolve_into_core_types() {
        let text = "target_percent = 25\ncontroller = \"window\"\n\
                    [load]\nwidth_blocks = 8\nmax_duty_percent = 40\n\
                    [yield]\ngrace_s = 0.5\nignore_pids = [7]\n[probe]\nfault_hold_s = 1.5\n";
        let config = parse(text).unwrap();
        let fill = config.fill_settings();
        assert_eq!(fill.target, Utilization::from_percent(25.0).unwrap());
        assert_eq!(fill.width.get(), 8);
        assert_eq!(fill.max_duty, Duty::from_percent(40.0).unwrap());
        assert_eq!(fill.fault_hold, Duration::from_millis(1500));
        let yielding = config.yield_settings();
        assert_eq!(yielding.grace, Duration::from_millis(500));
        assert_eq!(yielding.ignore_pids, vec![7]);
        assert_eq!(config.controller_kind(), ControllerKind::Window);
    }

    #[test]
    fn resolving_an_unvalidated_config_clamps_instead_of_panicking() {
        let mut config = Config {
            target_percent: f64::NAN,
            ..Config::default()
        };
        config.load.width_blocks = 0;
        config.load.max_duty_percent = 1e9;
        config.yielding.grace_s = f64::INFINITY;
        config.probe.fault_hold_s = -3.0;
        let fill = config.fill_settings();
        assert_eq!(fill.target, Utilization::ZERO);
        assert_eq!(fill.width, Width::ONE_WARP);
        assert_eq!(fill.max_duty, Duty::FULL);
        assert_eq!(fill.fault_hold, Duration::ZERO);
        assert_eq!(config.yield_settings().grace, Duration::MAX);
    }

    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpufill-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn load_reads_a_file_and_names_it_in_errors() {
        let good = temp_file("good.toml", b"tick_ms = 100\n");
        assert_eq!(Config::load(&good).unwrap().tick_ms, 100);
        let bad = temp_file("bad.toml", b"tick_ms = 0\n");
        let e = Config::load(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:1:11: tick_ms: must be between 1 and 1000, got 0",
                bad.display()
            )
        );
    }

    #[test]
    fn load_names_the_file_and_the_os_reason() {
        let path = std::env::temp_dir().join("gpufill-no-such-dir/gpufill.toml");
        let e = Config::load(&path).unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("{}: cannot read: ", path.display())),
            "{e}"
        );
        assert!(message.contains("os error"), "{e}");
    }

    #[test]
    fn load_refuses_text_that_is_not_utf8_with_its_position() {
        let path = temp_file("latin1.toml", b"tick_ms = 10\n# caf\xe9\n");
        let e = Config::load(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:2:6: not valid UTF-8", path.display())
        );
    }

    #[test]
    fn positions_past_the_end_or_inside_a_character_do_not_panic() {
        assert_eq!(Position::of_offset("", 5), Position { line: 1, column: 1 });
        assert_eq!(Position::of_offset("é", 1), Position { line: 1, column: 1 });
        assert_eq!(
            Position::of_offset("a\nb", 99),
            Position { line: 2, column: 2 }
        );
    }

    /// A tiny linear congruential generator: deterministic, no dependency.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) as usize) % below.max(1)
        }
    }

    fn check_without_panic(bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        if let Ok(config) = Config::from_toml_str(&text, Some(Path::new("fuzz.toml"))) {
            // Whatever is accepted renders, parses back equal, and resolves.
            assert_eq!(parse(&config.to_toml_string()).unwrap(), config);
            let _ = (
                config.fill_settings(),
                config.yield_settings(),
                config.tick(),
            );
        }
    }

    #[test]
    fn mutated_examples_never_panic() {
        let example = EXAMPLE.as_bytes();
        for end in 0..=example.len() {
            check_without_panic(&example[..end]);
        }
        const BYTES: &[u8] = b"\"'[]{}=.,-+#\n\r\t 019eEx_:\xff\xc3";
        let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
        for _ in 0..600 {
            let mut bytes = example.to_vec();
            for _ in 0..=rng.next(4) {
                let at = rng.next(bytes.len());
                match rng.next(3) {
                    0 => bytes[at] = BYTES[rng.next(BYTES.len())],
                    1 => bytes.insert(at, BYTES[rng.next(BYTES.len())]),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
            check_without_panic(&bytes);
        }
    }

    #[test]
    fn activity_policy_resolves_with_its_idle_grace_and_ignored_names() {
        let config = parse(
            "[yield]\npolicy = \"activity\"\nidle_grace_s = 12\nignore_names = [\"dcgm-exporter\"]\n",
        )
        .unwrap();
        let y = config.yield_settings();
        assert_eq!(
            y.mode,
            YieldMode::Activity {
                idle_grace: Duration::from_secs(12)
            }
        );
        assert_eq!(y.ignore_names, vec!["dcgm-exporter".to_string()]);
        assert!(parse("[yield]\nidle_grace_s = -1\n").is_err());
        assert!(parse("[yield]\nignore_names = [\"\"]\n").is_err());
        assert!(parse("[yield]\nignore_names = [\"/usr/bin/x\"]\n").is_err());
        assert!(parse("[yield]\npolicy = \"never\"\n").is_err());
    }

    #[test]
    fn release_context_sets_the_release_delay_only_when_on() {
        assert_eq!(Config::default().fill_settings().release_after, None);
        let config = parse("[yield]\nrelease_context = true\nrelease_after_s = 2.5\n").unwrap();
        assert_eq!(
            config.fill_settings().release_after,
            Some(Duration::from_millis(2500))
        );
        assert!(parse("[yield]\nrelease_after_s = -1\n").is_err());
        assert!(parse("[yield]\nrelease_context = 1\n").is_err());
    }

    #[test]
    fn mps_mode_follows_the_daemon_in_auto_and_the_setting_otherwise() {
        let auto = Config::default();
        assert_eq!(auto.yield_settings_with(true).mode, YieldMode::Mps);
        assert_eq!(auto.yield_settings_with(false).mode, YieldMode::Presence);
        let off = parse("[yield]\nmps = \"off\"\n").unwrap();
        assert_eq!(off.yield_settings_with(true).mode, YieldMode::Presence);
        let on = parse("[yield]\nmps = \"on\"\n").unwrap();
        assert_eq!(on.yield_settings_with(false).mode, YieldMode::Mps);
        let e = parse("[yield]\nmps = \"maybe\"\n").unwrap_err();
        assert_eq!(e.key(), Some("yield.mps"), "{e}");
    }
}
