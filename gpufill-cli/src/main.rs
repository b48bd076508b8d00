//! The `gpufill` binary: parses flags, installs logging, runs a subcommand, and maps
//! failures onto exit codes (0 ok or stopped by a signal, 1 runtime failure, 2 usage
//! or config error).

use std::process::ExitCode;

use clap::Parser;
use gpufill_cli::error::{USAGE_EXIT, flag_error_text};
use gpufill_cli::{UsageError, cli::Cli};

fn main() -> ExitCode {
    lower_mps_priority();
    // First of all, before anything can take time: a SIGHUP sent while gpufill starts
    // must be kept for the reloader, not kill the daemon.
    if let Err(e) = gpufill_cli::reload::catch_hangups() {
        gpufill_cli::logging::last_word(&format!("{e:#}"));
        return ExitCode::FAILURE;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap's errors read as gpufill's own, with the same exit status 2.
        Err(e) => match flag_error_text(&e) {
            Some(text) => {
                gpufill_cli::logging::last_word(&text);
                return ExitCode::from(USAGE_EXIT);
            }
            None => return gpufill_cli::error::print_help_or_version(&e),
        },
    };
    gpufill_cli::logging::init(cli.verbose, cli.quiet, cli.log_format);
    gpufill_cli::cli::unknown_env::warn_unknown(&<Cli as clap::CommandFactory>::command());
    match gpufill_cli::dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if gpufill_cli::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            gpufill_cli::logging::last_word(&format!("{err:#}"));
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(USAGE_EXIT)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Under MPS, gpufill's own client asks for a priority below normal
/// (`CUDA_MPS_CLIENT_PRIORITY=1`, read by the CUDA driver at its start): the MPS server
/// then schedules other clients' work ahead of ours when both have some
/// (its one measurement, not resolved: docs/benchmarks.md#not-resolved-or-not-measured).
/// Without MPS the variable does nothing. A
/// value set by the user is kept.
fn lower_mps_priority() {
    const KEY: &str = "CUDA_MPS_CLIENT_PRIORITY";
    if std::env::var_os(KEY).is_none() {
        // SAFETY: called first thing in main, before any thread exists, so no other
        // thread can read or write the environment at the same time.
        unsafe { std::env::set_var(KEY, "1") };
    }
}
