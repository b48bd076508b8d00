//! The flags of config keys ([`KeyFlags`]): each built from its key's line (the runtime's
//! settings table, or `[metrics]`'s own: [`Config::flag_of`]) and parsed by the type of
//! the key's value ([`FlagValue`]), and the values they give as [`Overrides`]. Which
//! subcommand takes which, in the order `--help` lists them, is a [`KeySet`].

use std::marker::PhantomData;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use gpufill_runtime::FlagValue;

use super::{Number, parse_gpus};
use crate::config::{Config, MetricsConfig, Overrides};

/// Keys with a flag that a subcommand takes, in the order `--help` lists them. What each
/// flag is (its name, value, help and type) is its key's line: the runtime's settings
/// table (`flag(...)`), or `[metrics]`'s own ([`Config::flag_of`]).
pub trait KeySet {
    /// The keys.
    const KEYS: &'static [&'static str];
}

/// The keys whose flags both `run` and `simulate` take.
#[derive(Debug, Default)]
pub struct LoopKeys;

impl KeySet for LoopKeys {
    const KEYS: &'static [&'static str] = &[
        "target_percent",
        "controller",
        "metric",
        "load.kernel",
        "load.width_blocks",
        "load.max_duty_percent",
        "yield.grace_s",
        "yield.beside_live",
        "yield.max_cost_percent",
        "tick_ms",
        "load.period_ms",
        MetricsConfig::LISTEN,
    ];
}

/// The key whose flag only `run` takes: `simulate` has one simulated GPU.
#[derive(Debug, Default)]
pub struct RunKeys;

impl KeySet for RunKeys {
    const KEYS: &'static [&'static str] = &["gpus"];
}

/// The flags of the keys of `S`, built from their lines, and the values they gave.
#[derive(Debug, Default)]
pub struct KeyFlags<S> {
    /// What the flags given set.
    pub overrides: Overrides,
    keys: PhantomData<S>,
}

impl<S: KeySet> Args for KeyFlags<S> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        S::KEYS.iter().fold(cmd, |cmd, key| cmd.arg(arg_of(key)))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl<S: KeySet> FromArgMatches for KeyFlags<S> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut overrides = Overrides::default();
        for key in S::KEYS {
            if matches.value_source(key).is_some() {
                take(matches, key, overrides.set(key));
            }
        }
        Ok(KeyFlags {
            overrides,
            keys: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The environment variable of a long flag: `--max-duty` is `GPUFILL_MAX_DUTY`.
pub fn env_var_of(flag: &str) -> String {
    format!(
        "GPUFILL_{}",
        flag.trim_start_matches('-')
            .replace('-', "_")
            .to_uppercase()
    )
}

/// The flag of `key` (one of a [`KeySet`]'s): from its line, with the key it sets and its
/// `GPUFILL_*` variable, parsed by the type of the key's value.
fn arg_of(key: &'static str) -> Arg {
    let flag = Config::flag_of(key).unwrap_or_else(|| panic!("{key} has no flag"));
    let arg = Arg::new(key)
        .long(flag.long.trim_start_matches('-'))
        .value_name(flag.value_name)
        .help(format!("{} [config: {key}]", flag.help))
        .env(env_var_of(flag.long))
        .action(ArgAction::Set);
    match Config::default().flag_value(key) {
        Some(FlagValue::Number(_)) => arg.value_parser(Number),
        Some(FlagValue::U32(_)) => arg.value_parser(clap::value_parser!(u32)),
        Some(FlagValue::U64(_)) => arg.value_parser(clap::value_parser!(u64)),
        // A hyphen may stand for an underscore (`--beside-live fill-gaps`), as the
        // names' own parser allows; clap hands on the name itself.
        Some(FlagValue::Name(choice)) => arg.value_parser(PossibleValuesParser::new(
            choice.names().iter().map(|name| {
                let hyphens = name.replace('_', "-");
                let value = PossibleValue::new(*name);
                if hyphens == *name {
                    value
                } else {
                    value.alias(hyphens)
                }
            }),
        )),
        Some(FlagValue::Gpus(_)) => arg.value_parser(parse_gpus),
        Some(FlagValue::Text(_)) | None => arg.value_parser(clap::value_parser!(String)),
    }
}

/// Writes the value `matches` holds for `key` (parsed by [`arg_of`]'s parser) into `into`.
fn take(matches: &ArgMatches, key: &'static str, into: &mut Config) {
    match into.flag_value(key) {
        Some(FlagValue::Number(v)) => put(matches, key, v),
        Some(FlagValue::U32(v)) => put(matches, key, v),
        Some(FlagValue::U64(v)) => put(matches, key, v),
        Some(FlagValue::Gpus(v)) => put(matches, key, v),
        Some(FlagValue::Text(v)) => put(matches, key, v),
        Some(FlagValue::Name(choice)) => {
            if let Some(name) = matches.get_one::<String>(key) {
                // One of its names: the parser takes no other.
                let _ = choice.choose(name);
            }
        }
        None => {}
    }
}

fn put<T: Clone + Send + Sync + 'static>(matches: &ArgMatches, key: &str, into: &mut T) {
    if let Some(value) = matches.get_one::<T>(key) {
        into.clone_from(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use gpufill_runtime::{ControllerKind, GpuId, GpuSelector, Metric, Settings, SpinKernel};

    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn every_flag_a_line_has_is_taken_by_a_subcommand_once() {
        let mut lines: Vec<&str> = Settings::every_key()
            .into_iter()
            .filter(|k| k.flag.is_some())
            .map(|k| k.name)
            .collect();
        lines.push(MetricsConfig::LISTEN);
        let mut taken = [LoopKeys::KEYS, RunKeys::KEYS].concat();
        lines.sort_unstable();
        taken.sort_unstable();
        assert_eq!(taken, lines);
    }

    #[test]
    fn each_flag_sets_its_key_and_only_those_given() {
        let cli = Cli::try_parse_from([
            "gpufill",
            "run",
            "--target",
            "41",
            "--controller",
            "window",
            "--metric",
            "sm",
            "--kernel",
            "spin",
            "--width",
            "3",
            "--max-duty",
            "90",
            "--grace",
            "2",
            "--beside-live",
            "fill-gaps",
            "--max-cost",
            "1.5",
            "--tick-ms",
            "25",
            "--period-ms",
            "100",
            "--metrics",
            "127.0.0.1:0",
            "--gpus",
            "1,0",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("run")
        };
        let overrides = args.overrides();
        let mut config = Config::default();
        config.apply(&overrides);
        assert_eq!(config.target_percent, 41.0);
        assert_eq!(config.controller, ControllerKind::Window);
        assert_eq!(config.metric, Metric::Sm);
        assert_eq!(config.load.kernel, SpinKernel::Spin);
        assert_eq!(config.load.width_blocks, 3);
        assert_eq!(config.load.max_duty_percent, 90.0);
        assert_eq!(config.yielding.grace_s, 2.0);
        assert_eq!(
            config.yielding.beside_live,
            gpufill_core::BesideLive::FillGaps
        );
        assert_eq!(config.yielding.max_cost_percent, 1.5);
        assert_eq!(config.tick_ms, 25);
        assert_eq!(config.load.period_ms, 100);
        assert_eq!(config.metrics.listen, "127.0.0.1:0");
        assert_eq!(
            config.gpus,
            GpuSelector::from_list(vec![GpuId::Index(1), GpuId::Index(0)]).unwrap()
        );
        for key in [LoopKeys::KEYS, RunKeys::KEYS].concat() {
            assert!(overrides.sets(key), "{key}");
        }
        let cli = Cli::try_parse_from(["gpufill", "simulate", "--width", "4"]).unwrap();
        let Command::Simulate(args) = cli.command else {
            panic!("simulate")
        };
        let overrides = args.flags.overrides();
        assert!(overrides.sets("load.width_blocks"));
        assert!(!overrides.sets("target_percent"));
        let mut config = Config {
            settings: Settings {
                target_percent: 30.0,
                ..Settings::default()
            },
            ..Config::default()
        };
        config.apply(&overrides);
        assert_eq!((config.target_percent, config.load.width_blocks), (30.0, 4));
    }
}
