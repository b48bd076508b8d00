//! The `gpufill` binary's edges over [`gpufill_runtime`]: flags ([`cli`]), the TOML file
//! ([`config`], resolved once into the runtime's `Settings`), signals and SIGHUP reloads
//! ([`reload`]), the metrics and health HTTP listener ([`metrics`]), terminal output and
//! exit codes. Each subcommand is a module ([`run`], [`simulate`], [`status`], [`mod@bench`]);
//! the control logic lives in `gpufill-core`, the hardware in `gpufill-cuda` and
//! `gpufill-nvml`, and the runtime (opening GPUs, the supervised agent, reloads' logic,
//! `simulate`'s run, `bench`'s measurement, MPS restarts, and the text, CSV and plot
//! these commands print) in `gpufill-runtime`, which this crate reaches the hardware
//! through.

pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod generate;
pub mod healthcheck;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod reload;
pub mod run;
pub mod simulate;
pub mod status;
pub mod version;

use std::io::Write;

use anyhow::Context;
use std::path::{Path, PathBuf};

pub use cli::env_var_of;
use cli::{Command, ConfigCommand};
use config::{Config, Overrides};
pub use error::{UsageError, is_broken_pipe, value_source};

pub use config::DEFAULT_CONFIG;

/// The file to read: `named`, else `default` where it exists, else none (the built-in
/// defaults).
pub fn config_file(named: Option<&Path>, default: &Path) -> Option<PathBuf> {
    match named {
        Some(path) => Some(path.to_path_buf()),
        None => default.exists().then(|| default.to_path_buf()),
    }
}

/// Loads `file` (or the defaults), lays the command line's `overrides` over it, and
/// validates: the one place where flags reach the settings at start-up. `run` passes
/// every override it has, `--gpus` included, the same set its [`reload::Reloader`]
/// lays over the file at each reload.
///
/// # Errors
/// [`UsageError`] naming the file, key and reason.
pub fn resolve_config(file: Option<&Path>, overrides: &Overrides) -> Result<Config, UsageError> {
    let mut config = match file {
        Some(path) => Config::load(path).map_err(|e| UsageError(e.into()))?,
        None => Config::default(),
    };
    config.apply(overrides);
    // The file was validated when loaded, so what fails now came from a flag.
    config
        .validate_blaming(None, |key| overrides.sets(key))
        .map_err(|e| {
            let flag = e
                .key()
                .and_then(Overrides::flag_for_key)
                .map_or_else(|| "a flag".to_owned(), value_source);
            UsageError(anyhow::Error::new(e).context(format!("invalid {flag}")))
        })?;
    Ok(config)
}

/// The longest `run --duration`: 100 years.
const MAX_RUN_S: f64 = 100.0 * 365.0 * 86400.0;

fn check_config(file: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = match file {
        Some(path) => Config::load(path).map_err(|e| UsageError(e.into()))?,
        None => Config::default(),
    };
    let mut text = match file {
        Some(path) => format!("# {}: ok; resolved settings:\n", path.display()),
        None => "# no file given: built-in defaults\n".to_owned(),
    };
    text.push_str(&config.to_toml_string());
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to standard output")?;
    Ok(())
}

/// Runs one subcommand.
///
/// # Errors
/// [`UsageError`] for bad flags or config (exit 2), anything else for runtime failures (exit 1).
pub fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Simulate(args) => {
            let config = resolve_config(args.flags.config.as_deref(), &args.flags.overrides())?;
            simulate::run(&args, &config, &mut std::io::stdout().lock())
        }
        Command::Config(ConfigCommand::Check { file }) => {
            let file = config_file(file.as_deref(), Path::new(DEFAULT_CONFIG));
            check_config(file.as_deref(), &mut std::io::stdout().lock())
        }
        Command::Run(mut args) => {
            // Read by the reloader too: SIGHUP re-reads the default file as well.
            args.flags.config =
                config_file(args.flags.config.as_deref(), Path::new(DEFAULT_CONFIG));
            let config = resolve_config(args.flags.config.as_deref(), &args.overrides())?;
            if let Some(d) = args
                .duration
                .filter(|d| !(d.is_finite() && *d > 0.0 && *d <= MAX_RUN_S))
            {
                return Err(UsageError(anyhow::anyhow!(
                    "--duration must be a positive number of seconds, at most {MAX_RUN_S} (100 years), got {d}"
                ))
                .into());
            }
            run::run(&args, &config)
        }
        Command::Status(args) => status::run(&args, &mut std::io::stdout().lock()),
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout().lock()),
        Command::BenchForeign { ordinal, seconds } => bench::foreign::run(ordinal, seconds),
        Command::Generate(what) => generate::run(&what, &mut std::io::stdout().lock()),
        Command::Healthcheck(args) => healthcheck::run(&args, &mut std::io::stdout().lock()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_file_is_read_only_where_it_exists_and_nothing_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("gpufill.toml");
        let named = dir.path().join("mine.toml");
        assert_eq!(config_file(None, &default), None);
        std::fs::write(&default, "target_percent = 40\n").unwrap();
        assert_eq!(config_file(None, &default), Some(default.clone()));
        assert_eq!(config_file(Some(&named), &default), Some(named));
    }

    #[test]
    fn a_flag_names_its_environment_variable() {
        assert_eq!(env_var_of("--max-duty"), "GPUFILL_MAX_DUTY");
        assert_eq!(env_var_of("--tick-ms"), "GPUFILL_TICK_MS");
        // Neither on this test binary's command line nor in its environment.
        assert_eq!(value_source("--no-such-flag"), "--no-such-flag");
    }
}
