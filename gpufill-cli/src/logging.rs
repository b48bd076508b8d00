//! The log subscriber: human-readable lines on stderr, level from `-v`/`-q` unless
//! `RUST_LOG` is set, colours only on a terminal and without `NO_COLOR`. Only the binary
//! installs one; the libraries just emit `tracing` events.
//!
//! The log cannot vanish ([`filter_of`]): a `RUST_LOG` that is empty, not UTF-8, does not
//! parse, or enables nothing of gpufill's (`RUST_LOG=garbage` names a target `garbage`
//! and nothing else) is set aside for the `-v`/`-q` level, with one warning that says so;
//! and errors pass whatever `RUST_LOG` says, so a refused reload or a failed worker is
//! always seen. A drop-in or a chart's `extraEnv` with a stray `RUST_LOG` would
//! otherwise hide every line.
//!
//! Logging never fails the process: a log line that cannot be written (stderr on a full
//! disk, `2>/dev/full`, a pipe whose reader has gone: journald restarted, a FIFO reader
//! that quit) is dropped. The default subscriber would report such a failure with
//! `eprintln!`, which panics when stderr cannot be written; [`Stderr`] and
//! `log_internal_errors(false)` keep it from trying.

use std::ffi::OsStr;
use std::io::{self, IsTerminal, Write};

use tracing::Subscriber;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::LogFormat;

/// Installs the subscriber writing `format` (`--log-format`); `verbose` and `quiet`
/// count the `-v` and `-q` flags. Text, or one JSON object a line with `timestamp`,
/// `level`, `fields` (the message and the event's fields) and the GPU's span (`span`:
/// `{"gpu": 0, "name": "gpu"}`), never coloured. Either way the
/// level comes from [`filter_of`]: a `RUST_LOG` not understood gives way to `-v`/`-q`
/// with one warning, and errors always pass.
pub fn init(verbose: u8, quiet: u8, format: LogFormat) {
    let level = level_of(verbose, quiet);
    let (filter, warning) = filter_of(std::env::var_os("RUST_LOG").as_deref(), level);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(Stderr)
        .log_internal_errors(false)
        .with_target(false);
    // A second init (tests) is harmless: keep the first subscriber.
    let installed = match format {
        LogFormat::Text => {
            let ansi = colours(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            );
            tracing_subscriber::registry()
                .with(layer.with_ansi(ansi).with_filter(filter))
                .try_init()
        }
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                layer
                    .json()
                    .with_ansi(false)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_filter(filter),
            )
            .try_init(),
    }
    .is_ok();
    if let Some(warning) = warning.filter(|_| installed) {
        tracing::warn!("{warning}");
    }
}

/// The level that `-v` and `-q` (counted) ask for.
fn level_of(verbose: u8, quiet: u8) -> LevelFilter {
    match (verbose, quiet) {
        (0, 0) => LevelFilter::INFO,
        (1, _) => LevelFilter::DEBUG,
        (v, _) if v >= 2 => LevelFilter::TRACE,
        (_, 1) => LevelFilter::WARN,
        _ => LevelFilter::ERROR,
    }
}

/// The log filter for `rust_log` (the `RUST_LOG` variable, if set) and `level` (from
/// `-v`/`-q`), and the warning to log once when `RUST_LOG` was set aside. Errors pass
/// whatever `RUST_LOG` says.
pub fn filter_of<S>(
    rust_log: Option<&OsStr>,
    level: LevelFilter,
) -> (impl Filter<S> + use<S>, Option<String>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let (filter, warning) = match rust_log.map(env_filter) {
        None => (EnvFilter::new(level.to_string()), None),
        Some(Ok(filter)) => (filter, None),
        Some(Err(why)) => (
            EnvFilter::new(level.to_string()),
            Some(format!(
                "RUST_LOG not understood, logging at {} as -v/-q say: {why}",
                level.to_string().to_lowercase()
            )),
        ),
    };
    (filter.or(LevelFilter::ERROR), warning)
}

/// `RUST_LOG` as a filter, or why it is set aside: empty, not UTF-8, not the
/// directives' syntax, or enabling nothing of gpufill's.
fn env_filter(rust_log: &OsStr) -> Result<EnvFilter, String> {
    let text = rust_log
        .to_str()
        .ok_or_else(|| format!("{rust_log:?} is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err("it is empty".to_owned());
    }
    let filter = EnvFilter::builder()
        .parse(text)
        .map_err(|e| format!("{text:?}: {e}"))?;
    if !text
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .any(enables_ours)
    {
        return Err(format!(
            "{text:?} names neither a level nor a gpufill target (e.g. RUST_LOG=debug or \
             RUST_LOG=gpufill_core=debug)"
        ));
    }
    Ok(filter)
}

/// Whether one `RUST_LOG` directive can enable a line of gpufill's: a bare level
/// (`debug`), one for every target (`[span]=debug`), or one for a target of ours
/// (`gpufill_core=debug`; the targets are the crates' module paths). A bare word that is
/// no level (`garbage`) names a target, which nothing of ours has.
fn enables_ours(directive: &str) -> bool {
    let target = directive
        .split(['[', '='])
        .next()
        .unwrap_or_default()
        .trim();
    target.is_empty() || target.parse::<LevelFilter>().is_ok() || target.starts_with("gpufill")
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
fn colours(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// What tests log, captured.
#[cfg(test)]
pub(crate) mod capture {
    use std::io::{self, Write};
    use std::sync::{Arc, Mutex, PoisonError};

    use tracing_subscriber::fmt::MakeWriter;

    /// A log that writes into a shared buffer.
    #[derive(Clone, Default)]
    pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Captured {
        /// What was written so far.
        pub(crate) fn text(&self) -> String {
            let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    thread_local! {
        /// What this thread's events write while [`logged`] runs.
        static BUFFER: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
    }

    /// This thread's [`BUFFER`], or nowhere.
    struct ThreadBuffer;

    impl Write for ThreadBuffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            BUFFER.with(|b| {
                if let Some(out) = b.borrow_mut().as_mut() {
                    out.extend_from_slice(buf);
                }
            });
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Installs the global subscriber of [`logged`] (once): a test that runs a scoped
    /// subscriber of its own calls it first, for the same reason.
    pub(crate) fn install() {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ThreadBuffer)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
    }

    /// Runs `f` with this thread's events at debug and above logged; returns its result
    /// and the log. The subscriber is the test binary's global default, so it lives as
    /// long as the tests: a scoped one (`with_default`) can miss events while other
    /// tests' scoped subscribers come and go, which rebuild tracing's global interest
    /// and maximum level from the subscribers alive at that moment.
    pub(crate) fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        install();
        BUFFER.with(|b| *b.borrow_mut() = Some(Vec::new()));
        let result = f();
        let bytes = BUFFER.with(|b| b.borrow_mut().take()).unwrap_or_default();
        (result, String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::capture::Captured;
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some(OsStr::new(""))));
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(!colours(false, None));
    }

    /// The lines logged by one error, one warning, one info and one debug event under
    /// `rust_log` at `level`, and the warning about `RUST_LOG`.
    fn logged(rust_log: Option<&str>, level: LevelFilter) -> (String, Option<String>) {
        super::capture::install();
        let out = Captured::default();
        let (filter, warning) = filter_of(rust_log.map(OsStr::new), level);
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(out.clone())
            .with_ansi(false)
            .with_filter(filter);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::error!("an error");
            tracing::warn!("a warning");
            tracing::info!("some info");
            tracing::debug!("a detail");
        });
        (out.text(), warning)
    }

    #[test]
    fn a_rust_log_that_is_not_understood_gives_the_flags_level_and_a_warning() {
        for (rust_log, why) in [
            ("", "it is empty"),
            ("  ", "it is empty"),
            (
                "garbage",
                "\"garbage\" names neither a level nor a gpufill target",
            ),
            (
                "garbage=info,other",
                "names neither a level nor a gpufill target",
            ),
            ("gpufill_core=loud", "\"gpufill_core=loud\": "),
            ("[{", "\"[{\": "),
            (",", "\",\" names neither"),
        ] {
            let (text, warning) = logged(Some(rust_log), LevelFilter::INFO);
            for line in ["an error", "a warning", "some info"] {
                assert!(text.contains(line), "RUST_LOG={rust_log:?}: {text}");
            }
            assert!(!text.contains("a detail"), "RUST_LOG={rust_log:?}: {text}");
            let warning = warning.unwrap_or_else(|| panic!("RUST_LOG={rust_log:?}: no warning"));
            assert!(
                warning.starts_with("RUST_LOG not understood, logging at info as -v/-q say: "),
                "{warning}"
            );
            assert!(warning.contains(why), "RUST_LOG={rust_log:?}: {warning}");
        }
        let (text, warning) = logged(Some("garbage"), LevelFilter::DEBUG);
        assert!(text.contains("a detail") && warning.unwrap().contains("logging at debug"));
    }

    #[test]
    fn errors_pass_whatever_rust_log_says() {
        for rust_log in ["off", "gpufill_core=debug", "gpufill_cli=off"] {
            let (text, warning) = logged(Some(rust_log), LevelFilter::INFO);
            assert!(text.contains("an error"), "RUST_LOG={rust_log:?}: {text}");
            assert!(!text.contains("some info"), "RUST_LOG={rust_log:?}: {text}");
            assert_eq!(warning, None, "RUST_LOG={rust_log:?}");
        }
        let (text, _) = logged(None, LevelFilter::ERROR);
        assert!(
            text.contains("an error") && !text.contains("a warning"),
            "{text}"
        );
    }

    #[test]
    fn a_rust_log_that_is_understood_wins_over_the_flags() {
        for rust_log in [
            "debug",
            "warn,gpufill_core=trace",
            "gpufill=debug",
            "[run]=info,debug",
        ] {
            let (text, warning) = logged(Some(rust_log), LevelFilter::ERROR);
            assert_eq!(warning, None, "RUST_LOG={rust_log:?}");
            assert!(text.contains("a warning"), "RUST_LOG={rust_log:?}: {text}");
        }
        // The test's events have this module's target, gpufill_cli::logging::...
        let (text, _) = logged(Some("warn"), LevelFilter::TRACE);
        assert!(
            text.contains("a warning") && !text.contains("some info"),
            "{text}"
        );
    }

    #[test]
    fn the_flags_set_the_level_without_rust_log() {
        assert_eq!(level_of(0, 0), LevelFilter::INFO);
        assert_eq!(level_of(1, 0), LevelFilter::DEBUG);
        assert_eq!(level_of(3, 0), LevelFilter::TRACE);
        assert_eq!(level_of(0, 1), LevelFilter::WARN);
        assert_eq!(level_of(0, 2), LevelFilter::ERROR);
        let (text, warning) = logged(None, LevelFilter::WARN);
        assert!(
            text.contains("a warning") && !text.contains("some info"),
            "{text}"
        );
        assert_eq!(warning, None);
    }
}
