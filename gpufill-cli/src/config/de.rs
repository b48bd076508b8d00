//! Deserializers with plain messages: tables only, numbers, ranged integers, PIDs.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use gpufill_runtime::bounds::PID;
pub(super) use gpufill_runtime::{float_problem, range_reason};

const PID_MIN: u64 = PID.0;
const PID_MAX: u64 = PID.1;

/// A table, and only a table: serde's derived structs also read sequences by position,
/// which would make `probe = [1]` (or `[[probe]]`) mean `fault_hold_s = 1`.
pub(super) fn table<'de, D, T>(d: D) -> Result<T, D::Error>
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
pub(super) fn pids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(transparent)]
    struct Pid(#[serde(deserialize_with = "int_in::<_, _, PID_MIN, PID_MAX>")] u32);
    let pids = Vec::<Pid>::deserialize(d)?;
    Ok(pids.into_iter().map(|pid| pid.0).collect())
}

/// An `f64` field that also takes TOML integers (`grace_s = 5`), with a plain message.
pub(super) fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
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
pub(super) fn int_in<'de, D, T, const MIN: u64, const MAX: u64>(d: D) -> Result<T, D::Error>
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

fn int_problem(v: u64, min: u64, max: u64) -> Option<String> {
    gpufill_runtime::int_problem(v, (min, max))
}
