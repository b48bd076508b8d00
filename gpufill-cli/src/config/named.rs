//! Serde for the values the runtime defines without serde: the named choices
//! (`controller`, `metric`, `load.kernel`, `yield.policy`, `yield.mps`), parsed with
//! their `FromStr` (so the message is the runtime's: `expected "pi" or "window", got
//! "PI"`) and written with their `Display`; and `gpus`.

use std::fmt::{self, Display};
use std::str::FromStr;

use gpufill_runtime::{GpuId, GpuSelector};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A choice by name.
pub(super) mod choice {
    use super::*;

    pub fn serialize<S: Serializer, T: Display>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    /// Any scalar is read, so a wrong type (`mps = true`) hears the names too.
    pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr<Err = String>,
    {
        let (text, quoted) = d.deserialize_any(Scalar)?;
        text.parse().map_err(|reason: String| {
            let reason = if quoted {
                reason
            } else {
                reason.replace(&format!("got {text:?}"), &format!("got {text}"))
            };
            de::Error::custom(reason)
        })
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
}

/// `gpus`: `"all"`, one GPU (index or UUID), or a list of them.
pub(super) mod gpus {
    use super::*;

    pub fn serialize<S: Serializer>(value: &GpuSelector, s: S) -> Result<S::Ok, S::Error> {
        match value {
            GpuSelector::All => s.serialize_str("all"),
            GpuSelector::List(ids) => s.collect_seq(ids.iter().map(Id)),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GpuSelector, D::Error> {
        d.deserialize_any(GpuVisitor { whole: true })
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
