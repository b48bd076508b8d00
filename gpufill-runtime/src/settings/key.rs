//! What a key's line says beside its value ([`Key`]): whether a running agent keeps it
//! until a restart, and its command-line flag ([`Flag`]), as plain data. The runtime
//! knows no command line: the binary builds its flags from these, and writes a flag's
//! value where [`FlagValue`] says it lives.

use gpufill_core::names::Choice;

use super::rules::{Gpus, Named, Range, ZeroOr};
use crate::gpus::GpuSelector;

/// A key of the settings, as its line in the table defines it
/// ([`crate::Settings::every_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Its name in the file: `load.period_ms`.
    pub name: &'static str,
    /// Whether a running agent keeps its old value until a restart
    /// ([`crate::RESTART_KEYS`]).
    pub restart: bool,
    /// Its command-line flag, if it has one.
    pub flag: Option<Flag>,
}

/// A key's command-line flag: what `--help` says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// The flag: `--target`.
    pub long: &'static str,
    /// Its value's name in `--help`: `PCT`.
    pub value_name: &'static str,
    /// What it sets, in one line; the binary adds the key it sets
    /// (`[config: target_percent]`).
    pub help: &'static str,
}

/// Where a key with a flag keeps its value, by what the flag reads: the binary picks
/// the flag's parser by the variant and writes the parsed value through it.
pub enum FlagValue<'a> {
    /// A decimal: `--target 40.5`.
    Number(&'a mut f64),
    /// An integer of at most 32 bits: `--width 4`.
    U32(&'a mut u32),
    /// An integer of at most 64 bits: `--tick-ms 25`.
    U64(&'a mut u64),
    /// One of a choice's names: `--kernel spin`.
    Name(&'a mut dyn Chosen),
    /// `all`, or a list of GPUs: `--gpus 0,1`.
    Gpus(&'a mut GpuSelector),
    /// Text (the binary's own `--metrics`).
    Text(&'a mut String),
}

/// A choice ([`Choice`]) set by one of its names, whichever choice it is.
pub trait Chosen {
    /// Every name it takes, in the order the config lists them.
    fn names(&self) -> &'static [&'static str];

    /// Sets the value named `name`.
    ///
    /// # Errors
    /// The names it takes, when `name` is none of them.
    fn choose(&mut self, name: &str) -> Result<(), String>;
}

impl<T: Choice> Chosen for T {
    fn names(&self) -> &'static [&'static str] {
        T::NAMES
    }

    fn choose(&mut self, name: &str) -> Result<(), String> {
        *self = name.parse()?;
        Ok(())
    }
}

/// The rules of keys that may have a flag, with what the flag reads (a key with a flag
/// and another rule does not compile).
pub(crate) trait FlagRule<T> {
    /// `value` as the flag writes it.
    fn flag_value<'a>(&self, value: &'a mut T) -> FlagValue<'a>;
}

impl FlagRule<f64> for Range<f64> {
    fn flag_value<'a>(&self, value: &'a mut f64) -> FlagValue<'a> {
        FlagValue::Number(value)
    }
}

impl FlagRule<u32> for Range<u64> {
    fn flag_value<'a>(&self, value: &'a mut u32) -> FlagValue<'a> {
        FlagValue::U32(value)
    }
}

impl FlagRule<u64> for Range<u64> {
    fn flag_value<'a>(&self, value: &'a mut u64) -> FlagValue<'a> {
        FlagValue::U64(value)
    }
}

impl FlagRule<u64> for ZeroOr {
    fn flag_value<'a>(&self, value: &'a mut u64) -> FlagValue<'a> {
        FlagValue::U64(value)
    }
}

impl<T: Choice> FlagRule<T> for Named {
    fn flag_value<'a>(&self, value: &'a mut T) -> FlagValue<'a> {
        FlagValue::Name(value)
    }
}

impl FlagRule<GpuSelector> for Gpus {
    fn flag_value<'a>(&self, value: &'a mut GpuSelector) -> FlagValue<'a> {
        FlagValue::Gpus(value)
    }
}
