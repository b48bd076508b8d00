//! Configuration errors, with the file, position and dotted key they are about.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

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

    pub(super) fn invalid(origin: Option<&Path>, key: &str, reason: String) -> ConfigError {
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

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// The dotted key whose key or value covers byte `offset`, deepest first.
pub(super) fn key_at(table: &DeTable<'_>, offset: usize) -> Option<String> {
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
pub(super) fn span_of_key(table: &DeTable<'_>, dotted: &str) -> Option<Range<usize>> {
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
