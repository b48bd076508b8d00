//! Which GPUs to fill, by NVML index or UUID (the config's `gpus`, the `--gpus` flag).

use std::fmt;
use std::str::FromStr;

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
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse_item(item: &str) -> Result<GpuId, String> {
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
    /// ```
    /// use gpufill_runtime::{GpuId, GpuSelector};
    ///
    /// assert_eq!(GpuSelector::parse_flag("all"), Ok(GpuSelector::All));
    /// let two = GpuSelector::parse_flag("0, GPU-5f2c").unwrap();
    /// assert_eq!(two, GpuSelector::List(vec![GpuId::Index(0), GpuId::Uuid("GPU-5f2c".into())]));
    /// assert!(GpuSelector::parse_flag("0,0").is_err(), "a GPU named twice");
    /// ```
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

    /// Checks a selector built by hand: a list must be non-empty, hold valid UUIDs and
    /// name no GPU twice.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn check(&self) -> Result<(), String> {
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
