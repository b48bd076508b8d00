//! The `gpufill` binary's pieces: flags ([`cli`]), TOML config ([`config`]), logging,
//! and one module per subcommand. Only this crate knows TOML, flags, signals and the
//! log subscriber; the control logic lives in `gpufill-core`, the hardware in
//! `gpufill-cuda` and `gpufill-nvml`.

pub mod bench;
pub mod cli;
pub mod config;
pub mod faultlog;
pub mod live;
pub mod localtime;
pub mod logging;
pub mod metrics;
pub mod reload;
pub mod run;
pub mod select;
pub mod simulate;
pub mod sm;
pub mod status;
pub mod version;

use std::path::Path;

use cli::{Command, ConfigCommand, LoopFlags};
use config::Config;

/// A usage or config error: the binary exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UsageError(#[from] pub anyhow::Error);

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
        let flag = e.key().and_then(flag_for_key).unwrap_or("a flag");
        UsageError(anyhow::Error::new(e).context(format!("invalid {flag}")))
    })?;
    Ok(config)
}

/// The flag that sets a config key, for error messages.
fn flag_for_key(key: &str) -> Option<&'static str> {
    Some(match key {
        "target_percent" => "--target",
        "controller" => "--controller",
        "tick_ms" => "--tick-ms",
        "load.width_blocks" => "--width",
        "load.max_duty_percent" => "--max-duty",
        "yield.grace_s" => "--grace",
        "metrics.listen" => "--metrics",
        _ => return None,
    })
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
