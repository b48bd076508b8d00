//! The log subscriber: human-readable lines on stderr, level from `-v`/`-q` unless
//! `RUST_LOG` is set, colours only on a terminal and without `NO_COLOR`. Only the binary
//! installs one; the libraries just emit `tracing` events.
//!
//! Logging never fails the process: a log line that cannot be written (stderr on a full
//! disk, `2>/dev/full`, a pipe whose reader has gone: journald restarted, a FIFO reader
//! that quit) is dropped. The default subscriber would report such a failure with
//! `eprintln!`, which panics when stderr cannot be written; [`Stderr`] and
//! `log_internal_errors(false)` keep it from trying.

use std::io::{self, IsTerminal, Write};

use tracing_subscriber::EnvFilter;

pub use crate::cli::LogFormat;
use tracing_subscriber::fmt::MakeWriter;

/// Installs the text subscriber; `verbose` and `quiet` count the `-v` and `-q` flags.
pub fn init(verbose: u8, quiet: u8) {
    init_as(verbose, quiet, LogFormat::Text);
}

/// Installs the subscriber writing `format` (`--log-format`): text, or one JSON object
/// a line with `timestamp`, `level`, `fields` (the message and the event's fields) and
/// the GPU's span (`span`: `{"gpu": 0, "name": "gpu"}`), never coloured.
pub fn init_as(verbose: u8, quiet: u8, format: LogFormat) {
    let level = match (verbose, quiet) {
        (0, 0) => "info",
        (1, _) => "debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr)
        .log_internal_errors(false)
        .with_target(false);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(colours(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

/// Writes a message line to stderr, as the binary's last word (`gpufill: ...`): dropped
/// when stderr cannot be written, where `eprintln!` would panic (exit 101).
pub fn last_word(message: &str) {
    let _ = writeln!(io::stderr().lock(), "gpufill: {message}");
}

/// Standard error that drops what cannot be written: a log line lost is better than a
/// daemon stopped by its log stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Claims the whole line written either way, so the subscriber does not retry.
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Stderr {
        Stderr
    }
}

/// Whether to colour the log: on a terminal, unless `NO_COLOR` is set to anything but
/// the empty string (no-color.org). Logs to a file, journald or a pipe get plain text.
fn colours(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colours;
    use std::ffi::OsStr;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some(OsStr::new(""))));
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(!colours(false, None));
    }
}
