//! The log subscriber: human-readable lines on stderr, level from `-v`/`-q` unless
//! `RUST_LOG` is set, colours only on a terminal and without `NO_COLOR`. Only the binary
//! installs one; the libraries just emit `tracing` events.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; `verbose` and `quiet` count the `-v` and `-q` flags.
pub fn init(verbose: u8, quiet: u8) {
    let level = match (verbose, quiet) {
        (0, 0) => "info",
        (1, _) => "debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(colours(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .try_init();
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
