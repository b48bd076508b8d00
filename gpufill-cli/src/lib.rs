//! The `gpufill` binary's edges over [`gpufill_runtime`]: flags ([`cli`]), the TOML file
//! ([`config`], resolved once into the runtime's `Settings`), signals and SIGHUP reloads
//! ([`reload`]), the metrics and health HTTP listener ([`metrics`]), terminal output and
//! exit codes. Each subcommand is a module ([`run`], [`simulate`], [`status`], [`mod@bench`]);
//! the control logic lives in `gpufill-core`, the hardware in `gpufill-cuda` and
//! `gpufill-nvml`, and the runtime (opening GPUs, the supervised agent) in
//! `gpufill-runtime`.

pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod generate;
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
use std::path::Path;

use cli::{Command, ConfigCommand, LoopFlags};
use config::{Config, Overrides};
pub use error::UsageError;

/// Loads the config file named by the flags (or the defaults), applies the flags, and validates.
///
/// # Errors
/// [`UsageError`] naming the file, key and reason.
pub fn resolve_config(flags: &LoopFlags) -> Result<Config, UsageError> {
    let mut config = match &flags.config {
        Some(path) => Config::load(path).map_err(|e| UsageError(e.into()))?,
        None => Config::default(),
    };
    let overrides = flags.overrides();
    config.apply(&overrides);
    // The file was validated when loaded, so what fails now came from a flag.
    config
        .validate_blaming(None, |key| overrides.sets(key))
        .map_err(|e| {
            let flag = e
                .key()
                .and_then(Overrides::flag_for_key)
                .unwrap_or("a flag");
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

/// Whether `err` comes from writing to a pipe whose reader has gone (`| head`): the
/// reader wanted no more, which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs one subcommand.
///
/// # Errors
/// [`UsageError`] for bad flags or config (exit 2), anything else for runtime failures (exit 1).
pub fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Simulate(args) => {
            let config = resolve_config(&args.flags)?;
            simulate::run(&args, &config, &mut std::io::stdout().lock())
        }
        Command::Config(ConfigCommand::Check { file }) => {
            check_config(file.as_deref(), &mut std::io::stdout().lock())
        }
        Command::Run(args) => {
            let mut config = resolve_config(&args.flags)?;
            if let Some(gpus) = &args.gpus {
                config.gpus = gpus.clone();
            }
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
        Command::Status => status::run(&mut std::io::stdout().lock()),
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout().lock()),
        Command::BenchForeign { ordinal, seconds } => bench::foreign::run(ordinal, seconds),
        Command::Generate(what) => generate::run(&what, &mut std::io::stdout().lock()),
    }
}
