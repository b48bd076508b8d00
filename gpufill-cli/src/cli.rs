//! Command-line flags (clap derive). Flags override the config file, which overrides
//! the built-in defaults.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{ControllerChoice, GpuId, GpuSelector, KernelChoice, MetricChoice, Overrides};

/// Hold a GPU's utilization at a target with almost no GPU memory, and get out of the
/// way the moment real work arrives.
#[derive(Debug, Parser)]
#[command(name = "gpufill", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less log output (-q: warnings only, -qq: errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub quiet: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fill the selected GPUs until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Run the real control loop against a simulated GPU, in virtual time.
    Simulate(SimulateArgs),
    /// Show each GPU: name, UUID, utilization, memory and compute processes.
    Status,
    /// Work with config files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Measure tracking, memory, power and yielding on this machine's GPU.
    Bench(BenchArgs),
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

/// `gpufill config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file and print the resolved settings (defaults when no file).
    Check {
        /// The TOML file to check.
        file: Option<PathBuf>,
    },
}

/// Flags shared by `run` and `simulate`: each overrides the config key of the same meaning.
#[derive(Debug, Args, Default)]
pub struct LoopFlags {
    /// TOML config file (see gpufill.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Utilization to hold, percent 0-100 [config: target_percent].
    #[arg(long, value_name = "PCT")]
    pub target: Option<f64>,
    /// Controller [config: controller].
    #[arg(long, value_enum)]
    pub controller: Option<ControllerFlag>,
    /// What to hold at the target: NVML utilization or GPM SM utilization [config: metric].
    #[arg(long, value_enum)]
    pub metric: Option<MetricChoice>,
    /// The spin kernel [config: load.kernel].
    #[arg(long, value_enum)]
    pub kernel: Option<KernelChoice>,
    /// Blocks (one warp each) per kernel [config: load.width_blocks].
    #[arg(long, value_name = "BLOCKS")]
    pub width: Option<u32>,
    /// Upper bound of our own time share, percent [config: load.max_duty_percent].
    #[arg(long, value_name = "PCT")]
    pub max_duty: Option<f64>,
    /// Seconds to stay idle after the last foreign process left [config: yield.grace_s].
    #[arg(long, value_name = "SECS")]
    pub grace: Option<f64>,
    /// Loop tick in milliseconds [config: tick_ms].
    #[arg(long, value_name = "MS")]
    pub tick_ms: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9401; port 0
    /// picks a free port (logged) [config: metrics.listen].
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// `--controller`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ControllerFlag {
    /// PI controller with feed-forward (default).
    Pi,
    /// The original tool's 10 s window rule, for comparison.
    Window,
}

impl LoopFlags {
    /// The overrides these flags make.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            target_percent: self.target,
            controller: self.controller.map(|c| match c {
                ControllerFlag::Pi => ControllerChoice::Pi,
                ControllerFlag::Window => ControllerChoice::Window,
            }),
            metric: self.metric,
            kernel: self.kernel,
            width_blocks: self.width,
            max_duty_percent: self.max_duty,
            grace_s: self.grace,
            tick_ms: self.tick_ms,
            metrics_listen: self.metrics.clone(),
            ..Overrides::default()
        }
    }
}

/// `gpufill run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The loop's flags.
    #[command(flatten)]
    pub flags: LoopFlags,
    /// GPUs: "all", or a comma-separated list of NVML indices and UUIDs [config: gpus].
    #[arg(long, value_name = "LIST", value_parser = parse_gpus)]
    pub gpus: Option<GpuSelector>,
    /// Stop after this many seconds (for benchmarks and tests).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
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
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    pub duration: f64,
    /// A foreign job, START-END:LOAD (seconds, seconds, percent of time it wants the GPU),
    /// e.g. 5-12:30. Repeatable.
    #[arg(long, value_name = "START-END:LOAD", value_parser = crate::simulate::parse_foreign)]
    pub foreign: Vec<crate::simulate::ForeignSpec>,
    /// Write every tick to this CSV file: t_s,target,util,duty,state.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// NVML sampling period of the simulated GPU, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub sample_ms: u64,
    /// Simulate an MPS server (kernels of different processes run together).
    #[arg(long)]
    pub mps: bool,
    /// Simulate gpufill inside a PID namespace of its own (a container without
    /// hostPID): foreign jobs are not listed; device memory, utilization and
    /// per-process samples (2.6 s late, as on an H100) still show them.
    #[arg(long)]
    pub pid_namespace: bool,
    /// Seconds between rows of the printed table.
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    pub every: f64,
    /// Random foreign jobs arriving at this mean rate per hour (Poisson), each staying
    /// 10 s to 10 min and wanting 20-100 % of the GPU; reproducible with --seed.
    #[arg(long, value_name = "PER_HOUR")]
    pub random_foreign: Option<f64>,
    /// Seed of --random-foreign.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Pace virtual time at wall-clock speed (to scrape --metrics or send SIGHUP while
    /// it runs).
    #[arg(long)]
    pub realtime: bool,
    /// Local time of day at the start, HH:MM, for schedule windows (default: the
    /// host's local time).
    #[arg(long, value_name = "HH:MM", value_parser = gpufill_core::TimeOfDay::parse)]
    pub start_time: Option<gpufill_core::TimeOfDay>,
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
        default_value = "10,25,50,75,90"
    )]
    pub targets: Vec<f64>,
    /// Seconds per target.
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
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
    match s.trim().parse::<i64>() {
        Ok(index) => GpuId::from_index(index),
        Err(_) => GpuId::from_uuid(s.trim()),
    }
}
