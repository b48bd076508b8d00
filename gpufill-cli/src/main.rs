//! The `gpufill` binary: parses flags, installs logging, runs a subcommand, and maps
//! failures onto exit codes (0 ok or stopped by a signal, 1 runtime failure, 2 usage
//! or config error).

use std::process::ExitCode;

use clap::Parser;
use gpufill_cli::{UsageError, cli::Cli};

fn main() -> ExitCode {
    // First of all, before anything can take time: a SIGHUP sent while gpufill starts
    // must be kept for the reloader, not kill the daemon.
    if let Err(e) = gpufill_cli::reload::catch_hangups() {
        gpufill_cli::logging::last_word(&format!("{e:#}"));
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    gpufill_cli::logging::init(cli.verbose, cli.quiet);
    match gpufill_cli::dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if gpufill_cli::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            gpufill_cli::logging::last_word(&format!("{err:#}"));
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
