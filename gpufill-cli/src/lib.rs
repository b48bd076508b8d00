//! The `gpufill` binary's edges over [`gpufill_runtime`]: flags ([`cli`]), the TOML file
//! ([`config`], resolved once into the runtime's `Settings`), signals and SIGHUP reloads
//! ([`reload`]), the metrics and health HTTP listener ([`metrics`]), terminal output and
//! exit codes. Each subcommand is a module ([`run`], [`simulate`], [`status`], [`bench`]);
//! the control logic lives in `gpufill-core`, the hardware in `gpufill-cuda` and
//! `gpufill-nvml`, and the runtime (opening GPUs, the supervised agent) in
//! `gpufill-runtime`.

pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod reload;
pub mod run;
pub mod simulate;
pub mod status;

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
    config.apply(&flags.overrides());
    // The file was validated when loaded, so what fails now came from a flag.
    config.validate(None).map_err(|e| {
        let flag = e
            .key()
            .and_then(Overrides::flag_for_key)
            .unwrap_or("a flag");
        UsageError(anyhow::Error::new(e).context(format!("invalid {flag}")))
    })?;
    Ok(config)
}

fn check_config(file: Option<&Path>) -> anyhow::Result<()> {
    let config = match file {
        Some(path) => Config::load(path).map_err(|e| UsageError(e.into()))?,
        None => Config::default(),
    };
    match file {
        Some(path) => println!("# {}: ok; resolved settings:", path.display()),
        None => println!("# no file given: built-in defaults"),
    }
    print!("{}", config.to_toml_string());
    Ok(())
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
        Command::Config(ConfigCommand::Check { file }) => check_config(file.as_deref()),
        Command::Run(args) => {
            let mut config = resolve_config(&args.flags)?;
            if let Some(gpus) = &args.gpus {
                config.gpus = gpus.clone();
            }
            if let Some(d) = args.duration.filter(|d| !(d.is_finite() && *d > 0.0)) {
                return Err(UsageError(anyhow::anyhow!(
                    "--duration must be a positive number of seconds, got {d}"
                ))
                .into());
            }
            run::run(&args, &config)
        }
        Command::Status => status::run(&mut std::io::stdout().lock()),
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout().lock()),
        Command::BenchForeign { ordinal, seconds } => bench::foreign::run(ordinal, seconds),
    }
}
