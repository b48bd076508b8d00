//! The configuration file: TOML read straight into the runtime's [`Settings`], with the
//! binary's own `[metrics]` table beside them, and flags laid over it.
//!
//! Every key but `metrics.listen` is defined once, in `gpufill-runtime` (its name,
//! type, default, rule, doc, whether it needs a restart and its flag:
//! `gpufill-runtime/src/settings/defaults.rs`); this module knows none of them. It
//! reads TOML, says where in the file a value is (`file:line:column: key: reason`), and
//! holds the one key of the binary's own, with its flag ([`MetricsConfig::LISTEN_FLAG`]).
//!
//! Layering is defaults < file < flags: [`Config::default`] holds the defaults (the
//! runtime's [`Settings::default`] and no metrics endpoint; the shipped
//! `gpufill.example.toml` lists them, and a test keeps the two equal), [`Config::load`]
//! reads a file over them, and [`Config::apply`] lays the flags ([`Overrides`]) on top.
//! Every rule lives in one place, [`Settings::validate`]: [`Config::validate`] calls it
//! (and checks `metrics.listen`), for a file and again after the flags, so a value is
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

mod error;
mod metrics;
mod overrides;
#[cfg(test)]
mod props;

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::LazyLock;

use gpufill_runtime::Settings;
use gpufill_runtime::file::{KeyOf, Table, TableOf};
use gpufill_runtime::{Flag, FlagValue};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use toml::de::DeTable;

pub use error::{ConfigError, Position};
use error::{key_at, span_of_key};
pub use metrics::MetricsConfig;
pub use overrides::Overrides;

/// The config file `run` and `config check` read when no `--config` (nor
/// `GPUFILL_CONFIG`) names one, where it exists: the one the .deb installs.
pub const DEFAULT_CONFIG: &str = "/etc/gpufill/gpufill.toml";

/// The whole configuration, as in `gpufill.toml`: the runtime's settings (every key
/// but one) and the binary's `[metrics]`. Every key is optional. It reads as the
/// settings it holds (`config.load.period_ms`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// Every key but `[metrics]`.
    pub settings: Settings,
    /// The `[metrics]` table: the Prometheus endpoint, which only the binary has.
    pub metrics: MetricsConfig,
}

impl Deref for Config {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl DerefMut for Config {
    fn deref_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }
}

/// The file's top-level keys: the settings', then `metrics`.
static KEYS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| [Settings::KEYS, &["metrics"]].concat());

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Config;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("struct Config")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
                let mut config = Config::default();
                while let Some(key) = map.next_key_seed(KeyOf(&KEYS))? {
                    if key == "metrics" {
                        config.metrics = map.next_value_seed(TableOf::new())?;
                    } else {
                        config.settings.read_value(key, &mut map)?;
                    }
                }
                Ok(config)
            }
        }
        d.deserialize_struct("Config", &KEYS, Keys)
    }
}

impl Serialize for Config {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("Config", KEYS.len())?;
        self.settings.write_fields(&mut out)?;
        out.serialize_field("metrics", &self.metrics)?;
        out.end()
    }
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
        let document = DeTable::parse(text).map_err(|e| {
            let (at, reason) = match too_deep(text, e.message()) {
                Some(line) => (Some(line), TOO_DEEP.to_owned()),
                None => (
                    e.span().map(|span| span.start),
                    name_the_duplicate(text, e.message(), e.span()),
                ),
            };
            ConfigError::Syntax {
                origin: owned_origin(),
                position: at.map(|at| Position::of_offset(text, at)),
                reason,
            }
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
        let in_file = |key: &str| span_of_key(document.get_ref(), key).is_some();
        config.validate_blaming(origin, in_file).map_err(|mut e| {
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

    /// Reads, parses and validates a configuration file: a regular file (a FIFO or a
    /// device such as `/dev/zero` is refused without a blocking open or a read, so it
    /// can neither block a reload nor fill memory) of at most [`MAX_FILE_BYTES`].
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read, else as
    /// [`Config::from_toml_str`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (text, _) = read_text(path)?;
        Config::from_toml_str(&text, Some(path))
    }

    /// Whether `text` is TOML that sets no key at all (empty, blank or only comments):
    /// all defaults, as at start, but on a reload more likely a file an editor has just
    /// truncated than a wish.
    pub fn sets_no_key(text: &str) -> bool {
        DeTable::parse(text).is_ok_and(|doc| doc.get_ref().is_empty())
    }

    /// Checks every range and the relations between keys. Both loaders call it; call it
    /// again after [`Config::apply`], so flags are judged by the same rules.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `origin`, the key and the reason, for the first
    /// problem found.
    pub fn validate(&self, origin: Option<&Path>) -> Result<(), ConfigError> {
        self.validate_blaming(origin, |_| false)
    }

    /// [`Config::validate`], where a broken relation between two keys is blamed on the
    /// one `set_by_user` says the user set, when only one of them is: a file with only
    /// `tick_ms = 49` hears about `tick_ms`, not about `load.period_ms` it never wrote.
    ///
    /// # Errors
    /// As [`Config::validate`].
    pub fn validate_blaming(
        &self,
        origin: Option<&Path>,
        set_by_user: impl Fn(&str) -> bool,
    ) -> Result<(), ConfigError> {
        if let Err(e) = self.settings.validate() {
            let e = match &e.other {
                Some((other, _)) if !set_by_user(e.key) && set_by_user(other) => {
                    let other = *other;
                    e.blaming(other)
                }
                _ => e,
            };
            return Err(ConfigError::invalid(origin, e.key, e.reason));
        }
        match self.metrics.problem() {
            None => Ok(()),
            Some((key, reason)) => Err(ConfigError::invalid(origin, key, reason)),
        }
    }

    /// The flag of `key`: its line's in the runtime's settings table, or `[metrics]`'s
    /// own.
    pub fn flag_of(key: &str) -> Option<Flag> {
        if key == MetricsConfig::LISTEN {
            return Some(MetricsConfig::LISTEN_FLAG);
        }
        Settings::every_key()
            .into_iter()
            .find(|k| k.name == key)
            .and_then(|k| k.flag)
    }

    /// Where the value of `key`, a key with a flag, lives.
    pub fn flag_value(&mut self, key: &str) -> Option<FlagValue<'_>> {
        if key == MetricsConfig::LISTEN {
            return Some(FlagValue::Text(&mut self.metrics.listen));
        }
        self.settings.flag_value(key)
    }

    /// Sets `key` to its value in `from`, and says whether that changed it.
    pub fn copy_key(&mut self, from: &Config, key: &str) -> bool {
        if key == MetricsConfig::LISTEN {
            let changed = self.metrics.listen != from.metrics.listen;
            self.metrics.listen.clone_from(&from.metrics.listen);
            return changed;
        }
        self.settings.copy_key(&from.settings, key)
    }

    /// The runtime's settings: every key but `[metrics]`, which only the binary has.
    pub fn to_settings(&self) -> Settings {
        self.settings.clone()
    }

    /// The settings as TOML, every key present, for `gpufill config check` to print.
    /// Parsing the result gives back an equal configuration.
    pub fn to_toml_string(&self) -> String {
        // Every field serializes to TOML (no maps with odd keys, no `None`), so this
        // cannot fail; the fallback is still a TOML comment rather than a panic.
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render the settings: {e}\n"))
    }
}

/// The largest config file read: far above any real one (the example with every key
/// and its comments is about 5 KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a configuration file as text (see [`Config::load`]), with its modification
/// time when the file system gives one.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read or is not a regular file of at
/// most [`MAX_FILE_BYTES`]; [`ConfigError::Syntax`] when it is not UTF-8 or holds a NUL
/// byte.
pub fn read_text(path: &Path) -> Result<(String, Option<std::time::SystemTime>), ConfigError> {
    let (bytes, modified) = read_limited(path).map_err(|error| ConfigError::Read {
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
    // TOML allows NUL nowhere; toml's own message ("key with no value") would hide it.
    if let Some(at) = text.find('\0') {
        return Err(ConfigError::Syntax {
            origin: Some(path.to_path_buf()),
            position: Some(Position::of_offset(&text, at)),
            reason: "a NUL byte (\\0): a config is text, and TOML allows it nowhere".to_owned(),
        });
    }
    Ok((text, modified))
}

/// Reads `path` if it is a regular file of at most [`MAX_FILE_BYTES`], with the
/// modification time of the file read.
fn read_limited(path: &Path) -> std::io::Result<(Vec<u8>, Option<std::time::SystemTime>)> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking;
    // the type is then checked on the opened file, so nothing can swap it in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a config is read from a plain file only)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok((bytes, meta.modified().ok()))
}

/// toml says only "duplicate key" for a key or a table given twice; its span covers
/// the name, which the message then names.
/// What a key nested past the TOML parser's limit is refused with.
const TOO_DEEP: &str = "key nested too deep";

/// Where the key that the parser refused as nested too deep begins, when `message` is
/// that refusal: the parser says "recursion limit" without a place when a table header
/// or a dotted key has too many parts, so the line whose key has the most parts is
/// found here. (Inline tables and arrays nested too deep come with their place.)
fn too_deep(text: &str, message: &str) -> Option<usize> {
    if message != "recursion limit" {
        return None;
    }
    let mut offset = 0;
    let mut deepest = (0, None);
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let key = match trimmed.strip_prefix('[') {
            Some(header) => header.split(']').next(),
            None => trimmed.split_once('=').map(|(key, _)| key),
        };
        let parts = key.map_or(0, |key| key.split('.').count());
        if parts > deepest.0 {
            deepest = (parts, Some(offset + line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    deepest.1
}

fn name_the_duplicate(text: &str, message: &str, span: Option<std::ops::Range<usize>>) -> String {
    let name = span
        .filter(|_| message.starts_with("duplicate"))
        .and_then(|span| text.get(span))
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.contains('\n'));
    match name {
        Some(name) => format!("{message} `{name}`"),
        None => message.to_owned(),
    }
}
