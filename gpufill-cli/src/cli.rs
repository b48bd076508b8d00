//! Command-line flags (clap derive). Flags override the environment (`GPUFILL_*`, one
//! variable per flag, listed in `--help`, as dcgm-exporter maps its flags), which
//! overrides the config file, which overrides the built-in defaults.
//!
//! A flag that sets a config key is that key's: its name, value name, help and type are
//! on the key's line (the runtime's settings table), and [`KeyFlags`] builds the clap
//! argument from it. This file says only which subcommand takes which of them, in the
//! order `--help` lists them ([`LoopKeys`], [`RunKeys`]). clap derive cannot take its
//! arguments from a table, so those are built by hand (`cli/keys.rs`); every other flag
//! is derived.

use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};
pub use gpufill_runtime::simulate::{ForeignSpec, MAX_SIMULATED_S, ServiceSpec, TrainingSpec};
use gpufill_runtime::{GpuId, GpuSelector, TimeOfDay};

use crate::config::Overrides;

mod keys;
pub mod unknown_env;

pub use keys::{KeyFlags, KeySet, LoopKeys, RunKeys, env_var_of};

/// Hold a GPU's utilization at a target with almost no GPU memory, and get out of the
/// way the moment real work arrives.
#[derive(Debug, Parser)]
#[command(name = "gpufill", version = crate::version::long_version(), about, long_about = None)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less log output (-q: warnings only, -qq: errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub quiet: u8,
    /// Log lines as text, or as JSON objects (one a line, for a log collector).
    #[arg(long, value_name = "FORMAT", value_enum, global = true, default_value_t = LogFormat::Text, env = "GPUFILL_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and
    /// `span`/`spans` (the GPU's `gpu` index).
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fill the selected GPUs until SIGINT/SIGTERM.
    #[command(allow_negative_numbers = true)]
    Run(RunArgs),
    /// Run the real control loop against a simulated GPU, in virtual time.
    #[command(allow_negative_numbers = true)]
    Simulate(SimulateArgs),
    /// Show each GPU: name, UUID, utilization, memory and compute processes, and
    /// whether MPS runs (its clients share SMs; other processes time-slice).
    Status(StatusArgs),
    /// Work with config files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Measure tracking, memory, power and yielding on this machine's GPU.
    #[command(allow_negative_numbers = true)]
    Bench(BenchArgs),
    /// Write the man pages or a shell's completions, generated from these flags.
    #[command(subcommand)]
    Generate(GenerateCommand),
    /// Probe a running gpufill's /healthz (a container's HEALTHCHECK): exit 0 when it
    /// answers 200, 1 otherwise.
    Healthcheck(HealthcheckArgs),
    /// The foreign CUDA process of `bench`'s yield test (internal).
    #[command(hide = true)]
    BenchForeign {
        /// CUDA ordinal of the GPU.
        #[arg(long)]
        ordinal: usize,
        /// Seconds to run.
        #[arg(long)]
        seconds: f64,
    },
}

/// `gpufill status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `gpufill healthcheck`.
#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// The metrics address of the gpufill to probe, as given to `run --metrics`; an
    /// unspecified address (0.0.0.0, or :: in IPv6) is probed on loopback.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:9401",
        env = "GPUFILL_METRICS"
    )]
    pub metrics: String,
    /// Seconds to wait for the answer.
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = Number)]
    pub timeout: f64,
}

/// `gpufill config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file and print the resolved settings (defaults when no file).
    Check {
        /// The TOML file to check.
        file: Option<PathBuf>,
    },
}

/// `gpufill generate ...`: what packagers install, and `cargo install` users can make.
#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Write gpufill.1 and a page per subcommand (gpufill-run.1, ...) into DIR.
    Man {
        /// The directory, created if missing, e.g. ~/.local/share/man/man1.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print SHELL's completion script to standard output.
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

/// Flags shared by `run` and `simulate`: `--config`, then the flags of the loop's keys
/// ([`LoopKeys`]), each overriding its key.
#[derive(Debug, Args, Default)]
pub struct LoopFlags {
    /// TOML config file (see gpufill.example.toml); without it `run` reads
    /// /etc/gpufill/gpufill.toml where that exists.
    #[arg(long, value_name = "FILE", env = "GPUFILL_CONFIG")]
    pub config: Option<PathBuf>,
    /// The flags of the loop's keys.
    #[command(flatten)]
    pub keys: KeyFlags<LoopKeys>,
}

/// The value parser of a number flag: as clap's own for `f64`, but a number too large
/// for a float (`1e400`, 100,000 digits) is called out of range where the parse would
/// give infinity, and a long value is shortened in the message. `inf` stays infinity, for
/// the flag's own range check to refuse.
#[derive(Clone, Copy, Debug)]
pub struct Number;

impl TypedValueParser for Number {
    type Value = f64;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<f64, clap::Error> {
        let text = value.to_string_lossy();
        let reason = match number(&text) {
            Ok(v) => return Ok(v),
            Err(reason) => reason,
        };
        let arg = arg.map_or_else(|| "...".to_owned(), ToString::to_string);
        // As clap words its own (its constructor for this one is private).
        let message = format!(
            "invalid value '{}' for '{arg}': {reason}\n\nFor more information, try '--help'.\n",
            shortened(&text)
        );
        let mut err =
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd);
        // The flag, as clap's own errors carry it: the binary names a `GPUFILL_*`
        // variable the value came from by it (`error::flag_error_text`).
        err.insert(
            clap::error::ContextKind::InvalidArg,
            clap::error::ContextValue::String(arg),
        );
        Err(err)
    }
}

/// `text` as a number ([`Number`]), or why not.
fn number(text: &str) -> Result<f64, String> {
    let v: f64 = text.trim().parse().map_err(|e| format!("{e}"))?;
    let named = text
        .trim()
        .trim_start_matches(['+', '-'])
        .get(..3)
        .is_some_and(|s| s.eq_ignore_ascii_case("inf"));
    if v.is_infinite() && !named {
        let side = if v > 0.0 { "above " } else { "below -" };
        return Err(format!("out of range: {side}{:.1e}", f64::MAX));
    }
    Ok(v)
}

/// `text`, or its first 24 characters and how long it is.
fn shortened(text: &str) -> String {
    let count = text.chars().count();
    if count <= 40 {
        text.to_owned()
    } else {
        let head: String = text.chars().take(24).collect();
        format!("{head}... ({count} characters)")
    }
}

impl LoopFlags {
    /// The overrides these flags make.
    pub fn overrides(&self) -> Overrides {
        self.keys.overrides.clone()
    }
}

/// `gpufill run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The loop's flags.
    #[command(flatten)]
    pub flags: LoopFlags,
    /// `--gpus`.
    #[command(flatten)]
    pub gpus: KeyFlags<RunKeys>,
    /// Stop after this many seconds (for benchmarks and tests).
    #[arg(long, value_name = "SECS", value_parser = Number)]
    pub duration: Option<f64>,
}

impl RunArgs {
    /// The overrides its flags make: the loop's, and `--gpus`.
    pub fn overrides(&self) -> Overrides {
        self.flags.overrides().and(&self.gpus.overrides)
    }
}

fn parse_gpus(s: &str) -> Result<GpuSelector, String> {
    GpuSelector::parse_flag(s)
}

/// `gpufill simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The loop's flags.
    #[command(flatten)]
    pub flags: LoopFlags,
    /// Simulated seconds to run.
    #[arg(long, value_name = "SECS", default_value_t = 20.0, value_parser = Number)]
    pub duration: f64,
    /// A foreign job, START-END:LOAD (seconds, seconds, percent of time it wants the GPU),
    /// e.g. 5-12:30. A fluid load, not kernels: beside --beside-live fill-gaps it shows
    /// our kernels no meetings (--training and --service model them). Repeatable.
    #[arg(long, value_name = "START-END:LOAD", value_parser = ForeignSpec::parse)]
    pub foreign: Vec<ForeignSpec>,
    /// A service that holds its context from START to END (seconds) and answers
    /// requests: START-END:EVERY:BURST, a burst of ResNet-50 requests at batch 1 (as the
    /// simulator models them: gpufill-sim's docs) lasting BURST seconds every EVERY
    /// seconds, e.g.
    /// 2-60:6:0.17; or START-END:RATE/s:LENGTHms, isolated requests, RATE a second
    /// (Poisson, at most 100) of LENGTH milliseconds each alone, e.g. 2-60:20/s:0.87ms;
    /// with :gpu after it, requests whose kernels fill every SM in a few waves (large
    /// matmuls), which under MPS pay for our long kernels, e.g. 2-60:5/s:2ms:gpu.
    /// The report gives its requests' latency against alone. Repeatable.
    #[arg(long, value_name = "START-END:EVERY:BURST|START-END:RATE/s:LENGTHms[:gpu]", value_parser = ServiceSpec::parse)]
    pub service: Vec<ServiceSpec>,
    /// A training job that holds its context from START to END (seconds) and waits on
    /// its input: steps that keep the GPU busy STEP_MS each, in kernels of 300 us with
    /// 20 us launch gaps between them (a model choice for PyTorch eager training), in 10
    /// pieces with host-side gaps of 0.45 ms on average between them (as a ResNet-18
    /// step's were measured), then WAIT_MS on its input, one step after another, e.g.
    /// 2-300:12:25. The report gives
    /// how much our kernels slowed its step rate. Repeatable.
    #[arg(long, value_name = "START-END:STEP_MS:WAIT_MS", value_parser = TrainingSpec::parse)]
    pub training: Vec<TrainingSpec>,
    /// Write every tick to this CSV file: t_s,target,util,duty,state.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// NVML sampling period of the simulated GPU, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub sample_ms: u64,
    /// Simulate an MPS server (kernels of different processes run together).
    #[arg(long)]
    pub mps: bool,
    /// With --mps: the MPS control daemon is told to quit at this second. gpufill
    /// leaves it as `run` does (at its next looks), fills on without MPS under its
    /// yield policy, and the daemon exits once its last client has gone.
    #[arg(long, value_name = "SECS", requires = "mps", value_parser = Number)]
    pub mps_quit_at: Option<f64>,
    /// Simulate gpufill inside a PID namespace of its own (a container without
    /// hostPID): foreign jobs are not listed; device memory, utilization and
    /// per-process samples (late, as measured: docs/benchmarks.md) still show them.
    #[arg(long)]
    pub pid_namespace: bool,
    /// Simulate the host's own jitter in our kernels' timing, as on the hosts where
    /// gpufill once paused with nobody there (stalled launches, slower starts after an
    /// idle spell, as measured: docs/benchmarks.md, "Start jitter on an empty GPU").
    /// Every group of our kernels is then judged by the launcher's own rule (seeded by
    /// --seed).
    #[arg(long)]
    pub host_jitter: bool,
    /// Seconds between rows of the printed table.
    #[arg(long, value_name = "SECS", default_value_t = 0.5, value_parser = Number)]
    pub every: f64,
    /// Random foreign jobs arriving at this mean rate per hour (Poisson), each staying
    /// 10 s to 10 min and wanting 20-100 % of the GPU; reproducible with --seed.
    #[arg(long, value_name = "PER_HOUR", value_parser = Number)]
    pub random_foreign: Option<f64>,
    /// Seed of --random-foreign and --host-jitter.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Pace virtual time at wall-clock speed (to scrape --metrics or send SIGHUP while
    /// it runs).
    #[arg(long)]
    pub realtime: bool,
    /// Local time of day at the start, HH:MM, for schedule windows (default: the
    /// host's local time).
    #[arg(long, value_name = "HH:MM", value_parser = TimeOfDay::parse)]
    pub start_time: Option<TimeOfDay>,
}

/// `gpufill bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The GPU to measure: NVML index or UUID [default: the first GPU `run` would fill].
    #[arg(long, value_name = "ID", value_parser = parse_gpu)]
    pub gpu: Option<GpuId>,
    /// TOML config file: the loop, load and yield settings to measure (its target and
    /// GPUs are not used; `metric` must be `util`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Targets to hold one after the other, percent.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "10,25,50,75,90",
        value_parser = Number
    )]
    pub targets: Vec<f64>,
    /// Seconds per target.
    #[arg(long, value_name = "SECS", default_value_t = 15.0, value_parser = Number)]
    pub seconds: f64,
    /// Directory for bench.svg, bench.csv and bench.json (created if missing).
    #[arg(long, value_name = "DIR", default_value = "gpufill-bench")]
    pub out: PathBuf,
    /// Skip the yield test.
    #[arg(long)]
    pub no_yield: bool,
    /// Run on the simulated GPU, in virtual time (no GPU needed).
    #[arg(long)]
    pub sim: bool,
    /// Measure even while other processes use the GPU (they are ignored; the numbers will be off).
    #[arg(long)]
    pub force: bool,
}

fn parse_gpu(s: &str) -> Result<GpuId, String> {
    if s.trim() == "all" {
        return Err("bench measures one GPU: give its NVML index or UUID".to_owned());
    }
    match s.trim().parse::<i64>() {
        Ok(index) => GpuId::from_index(index),
        Err(_) => GpuId::from_uuid(s.trim()),
    }
}
