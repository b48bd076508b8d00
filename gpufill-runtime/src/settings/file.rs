//! Settings in a file (feature `serde`): every table reads and writes its keys by their
//! rules ([`super::rules::Rule`], which read with the readers here), so that the file's messages are the rules' own (`must be between
//! 1 and 1000, got 0`), integers out of range are refused where they are written, and
//! a key the table does not have is refused with serde's own message at its place.
//! No format is chosen here: the `gpufill` binary reads TOML with it.
//!
//! A file may hold tables of its reader's own beside the settings (the binary's
//! `[metrics]`): [`KeyOf`] reads a key among the settings' and the reader's, and
//! [`Table::read_value`] reads a settings key's value.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use crate::gpus::{GpuId, GpuSelector};

/// A table of settings as a file holds it: made by `settings_table!`.
pub trait Table: Default {
    /// Its keys, in order.
    const KEYS: &'static [&'static str];

    /// Reads the value of `key` (one of [`Table::KEYS`]) from `map` into the table.
    ///
    /// # Errors
    /// The value's error, with the rule's message.
    fn read_value<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<(), A::Error>;

    /// Writes every key that has something to say (an empty list of windows has not).
    ///
    /// # Errors
    /// The serializer's.
    fn write_fields<S: SerializeStruct>(&self, out: &mut S) -> Result<(), S::Error>;
}

/// Reads a table of settings: each key by its rule, unknown keys refused.
pub(crate) fn deserialize_table<'de, T: Table, D: Deserializer<'de>>(
    d: D,
    name: &'static str,
) -> Result<T, D::Error> {
    struct Keys<T>(PhantomData<T>);
    impl<'de, T: Table> Visitor<'de> for Keys<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut table = T::default();
            while let Some(key) = map.next_key_seed(KeyOf(T::KEYS))? {
                table.read_value(key, &mut map)?;
            }
            Ok(table)
        }
    }
    d.deserialize_struct(name, T::KEYS, Keys(PhantomData))
}

/// Writes a table of settings, key by key.
pub(crate) fn serialize_table<T: Table, S: Serializer>(
    table: &T,
    name: &'static str,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut out = s.serialize_struct(name, T::KEYS.len())?;
    table.write_fields(&mut out)?;
    out.end()
}

/// A key of a table that has `0` (`KeyOf(&["a", "b"])`): any other is refused with
/// serde's message (`unknown field `c`, expected `a` or `b``), where the key is written.
#[derive(Clone, Copy, Debug)]
pub struct KeyOf(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyOf {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeyOf {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'static str, E> {
        self.0
            .iter()
            .copied()
            .find(|k| *k == v)
            .ok_or_else(|| E::unknown_field(v, self.0))
    }
}

/// A table, and only a table: serde's derived structs also read sequences by position,
/// which would make `probe = [1]` (or `[[probe]]`) mean `fault_hold_s = 1`. For a
/// reader's own tables beside the settings too.
pub struct TableOf<T>(PhantomData<T>);

impl<T> TableOf<T> {
    /// The seed that reads a `T`.
    pub fn new() -> Self {
        TableOf(PhantomData)
    }
}

impl<T> Default for TableOf<T> {
    fn default() -> Self {
        TableOf::new()
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for TableOf<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for TableOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// A decimal that also takes integers (`grace_s = 5`), with a plain message; its range
/// is checked with the other settings.
pub(crate) fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
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

/// A scalar as text, and whether it was a string: a name, or what was written in its
/// place (`mps = true`).
pub(crate) fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<(String, bool), D::Error> {
    d.deserialize_any(Scalar)
}

/// A scalar as text, and whether it was a string.
struct Scalar;

impl Visitor<'_> for Scalar {
    type Value = (String, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok((v.to_owned(), true))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok((v.to_string(), false))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok((v.to_string(), false))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok((v.to_string(), false))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok((v.to_string(), false))
    }
}

/// `gpus`: `"all"`, one GPU (index or UUID), or a list of them.
pub(crate) fn gpus<'de, D: Deserializer<'de>>(d: D) -> Result<GpuSelector, D::Error> {
    d.deserialize_any(GpuVisitor { whole: true })
}

/// `gpus` as the file has it.
pub(crate) fn write_gpus<S: Serializer>(value: &GpuSelector, s: S) -> Result<S::Ok, S::Error> {
    match value {
        GpuSelector::All => s.serialize_str("all"),
        GpuSelector::List(ids) => s.collect_seq(ids.iter().map(Id)),
    }
}

struct Id<'a>(&'a GpuId);

impl Serialize for Id<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            GpuId::Index(index) => s.serialize_u32(*index),
            GpuId::Uuid(uuid) => s.serialize_str(uuid),
        }
    }
}

struct OneId(GpuId);

impl<'de> Deserialize<'de> for OneId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GpuVisitor { whole: false })
            .and_then(|selector| match selector {
                GpuSelector::List(mut ids) if ids.len() == 1 => Ok(OneId(ids.remove(0))),
                _ => Err(de::Error::custom("\"all\" cannot be part of a GPU list")),
            })
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
        while let Some(OneId(id)) = seq.next_element()? {
            ids.push(id);
        }
        GpuSelector::from_list(ids).map_err(de::Error::custom)
    }
}
