//! [`UsageError`], the error that makes the binary exit with status 2, and the one way
//! every error reads on stderr: `gpufill: ` and a lowercase message, clap's flag errors
//! included ([`flag_error_text`]).

use clap::error::ErrorKind;

/// The exit status of a usage or config error (clap's own, too).
pub const USAGE_EXIT: u8 = 2;

/// A usage or config error: the binary exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UsageError(#[from] pub anyhow::Error);

/// How a flag error found by clap reads after `gpufill: ` (where clap writes
/// `error: `; the binary writes every error with [`crate::logging::last_word`]): clap's
/// message, tips, usage line and hint. `None` where clap prints help or the version
/// rather than an error (`--help`, `--version`, no subcommand): `clap::Error::exit`
/// prints those as clap does.
pub fn flag_error_text(err: &clap::Error) -> Option<String> {
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return None;
    }
    // Plain text (`Display` of clap's styled string drops the colours).
    let rendered = err.render().to_string();
    let message = rendered.strip_prefix("error: ").unwrap_or(&rendered);
    // A value from a `GPUFILL_*` variable: clap names only the flag, so say which.
    let flag = err
        .get(clap::error::ContextKind::InvalidArg)
        .map(|arg| arg.to_string())
        .and_then(|arg| arg.split_whitespace().next().map(str::to_owned))
        .filter(|flag| flag.starts_with("--"));
    match flag.map(|flag| value_source(&flag)) {
        Some(source) if source.starts_with("GPUFILL_") => {
            Some(format!("{source}: {}", message.trim_end()))
        }
        _ => Some(message.trim_end().to_owned()),
    }
}

/// Prints what clap prints instead of an error (`--help`, `--version` on stdout; the
/// help for a missing subcommand on stderr, exit 2) and gives the exit status: 1, with
/// `gpufill: cannot write to standard output: ...`, when stdout cannot take it
/// (`--help > /dev/full`), as for every other command; 0 when its reader has gone
/// (`| head -1`).
pub fn print_help_or_version(err: &clap::Error) -> std::process::ExitCode {
    use std::io::Write;
    if err.use_stderr() {
        err.exit();
    }
    match err.print().and_then(|()| std::io::stdout().flush()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::ExitCode::SUCCESS,
        Err(e) => {
            crate::logging::last_word(&format!("cannot write to standard output: {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Where a flag's value came from, for messages: the flag when the command line has
/// it, else its `GPUFILL_*` variable when that is set (clap's `env`), else the flag.
pub fn value_source(flag: &str) -> String {
    let on_command_line = std::env::args_os().skip(1).any(|arg| {
        arg.to_str().is_some_and(|a| {
            a == flag
                || a.strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='))
        })
    });
    let variable = crate::cli::env_var_of(flag);
    if !on_command_line && std::env::var_os(&variable).is_some() {
        variable
    } else {
        flag.to_owned()
    }
}

/// Whether `err` comes from writing to a pipe whose reader has gone (`| head`): the
/// reader wanted no more, which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    use crate::cli::Cli;

    fn parse_error(args: &[&str]) -> clap::Error {
        Cli::try_parse_from(args).unwrap_err()
    }

    #[test]
    fn a_flag_error_reads_like_gpufills_own() {
        let text = flag_error_text(&parse_error(&["gpufill", "run", "--target", "abc"])).unwrap();
        assert!(
            text.starts_with("invalid value 'abc' for '--target <PCT>'"),
            "{text}"
        );
        assert!(!text.contains("error:"), "{text}");
        assert!(
            text.ends_with("For more information, try '--help'."),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_flag_keeps_clap_s_usage_line() {
        let text = flag_error_text(&parse_error(&["gpufill", "run", "--frob"])).unwrap();
        assert!(
            text.starts_with("unexpected argument '--frob' found"),
            "{text}"
        );
        assert!(text.contains("Usage: gpufill run [OPTIONS]"), "{text}");
    }

    #[test]
    fn help_and_version_are_left_to_clap() {
        for args in [
            &["gpufill", "--help"][..],
            &["gpufill", "run", "--help"],
            &["gpufill", "--version"],
            &["gpufill"],
        ] {
            assert_eq!(flag_error_text(&parse_error(args)), None, "{args:?}");
        }
    }
}
