//! The log subscriber: human-readable lines on stderr, level from `-v`/`-q` unless
//! `RUST_LOG` is set. Only the binary installs one; the libraries just emit `tracing` events.

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
        .try_init();
}
