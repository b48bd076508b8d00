//! Every key of gpufill's settings, each written once: its doc, its type, its default,
//! its rule ([`super::rules`]), whether a running agent takes a new value (`live`) or
//! keeps the old one until a restart (`restart`), and its command-line flag, if it has
//! one. The file's keys, the runtime's fields, the product's defaults, the keys that
//! need a restart and the binary's flags are these lines; the shipped
//! `gpufill.example.toml` lists the defaults (a test in `gpufill-cli` keeps the two
//! equal).

use gpufill_core::{BesideLive, ControllerKind};
use gpufill_cuda::SpinKernel;

use super::rules::{Gpus, Named, Names, Pids, Plain, Range, Windows, ZeroOr};
use super::window::WindowSettings;
use crate::gpus::GpuSelector;

settings_table! {
    /// Everything a running gpufill is told. Build it with `..Settings::default()` and
    /// check it with [`Settings::validate`].
    ///
    /// ```
    /// use gpufill_runtime::Settings;
    ///
    /// let mut settings = Settings { target_percent: 40.0, ..Settings::default() };
    /// assert!(settings.validate().is_ok());
    /// settings.tick_ms = 40; // 50 ms bursts cannot start on 40 ms ticks
    /// let e = settings.validate().unwrap_err();
    /// assert_eq!(e.key, "load.period_ms");
    /// ```
    pub struct Settings in "" {
        /// Utilization to hold, percent.
        pub target_percent: f64 = 50.0, Range(0.0, 100.0), live,
            flag("--target", "PCT", "Utilization to hold, percent 0-100");
        /// Which GPUs to fill: `"all"`, or NVML indices and UUIDs.
        pub gpus: GpuSelector = GpuSelector::All, Gpus, restart,
            flag("--gpus", "LIST", "GPUs: \"all\", or a comma-separated list of NVML indices and UUIDs");
        /// Which controller turns measured utilization into duty.
        pub controller: ControllerKind = ControllerKind::Pi, Named, live,
            flag("--controller", "CONTROLLER", concat!(
                "Controller: pi (gpufill's PI controller, the default) or window (the original ",
                "tool's 10 s rule, for comparison)"
            ));
        /// What is held at the target.
        pub metric: Metric = Metric::Util, Named, restart,
            flag("--metric", "METRIC", "What to hold at the target: NVML utilization or GPM SM utilization");
        /// Loop tick in milliseconds: how often processes and utilization are read, and
        /// when bursts may start (so it divides `load.period_ms`).
        pub tick_ms: u64 = 50, Range(1, 1000), restart,
            flag("--tick-ms", "MS", "Loop tick in milliseconds; it must divide the launch period");
        tables {
            /// The shape of our kernels (`[load]`).
            pub load: LoadSettings;
            /// When to stand aside (`[yield]`).
            pub yielding as "yield": YieldingSettings;
            /// How measurement faults and lost GPUs are handled (`[probe]`).
            pub probe: ProbeSettings;
            /// The idle rule and time-of-day windows (`[schedule]`).
            pub schedule: ScheduleSettings;
        }
    }
}

settings_table! {
    /// `[load]`: the shape of our kernels.
    pub struct LoadSettings in "load." {
        /// One-warp blocks per kernel: our share of the SMs.
        pub width_blocks: u32 = 1, Range(1, 65535), live,
            flag("--width", "BLOCKS", "Blocks (one warp each) per kernel");
        /// Upper bound of our own time share, percent.
        pub max_duty_percent: f64 = 100.0, Range(0.0, 100.0), live,
            flag("--max-duty", "PCT", "Upper bound of our own time share, percent");
        /// Launch period in milliseconds, a multiple of `tick_ms`.
        pub period_ms: u64 = 50, Range(1, 1000), restart,
            flag("--period-ms", "MS", "Launch period in milliseconds, a multiple of the tick");
        /// Longest single kernel in microseconds. The default, the period, makes each
        /// burst one kernel (the least CPU); a time slice, not our kernel's length,
        /// bounds what another context waits for it (docs/benchmarks.md, "Live
        /// services").
        pub max_kernel_us: u64 = 50_000, Range(10, 1_000_000), restart;
        /// Beside a dormant holder of the GPU: 0 (the default) fills with the same
        /// bursts as on a GPU of our own, so the holder's first request after a dormant
        /// spell waits at most a time slice; a length (at most the period) keeps one
        /// kernel of that many microseconds in flight at a time instead, so that request
        /// waits at most that long, for a wake-up per kernel (its CPU:
        /// docs/benchmarks.md, "Live services").
        pub beside_kernel_us: u64 = 0, ZeroOr(10, 100_000), restart;
        /// Under MPS (an MPS control daemon runs): each of our kernels this many
        /// microseconds (at most the period), a burst replayed from CUDA graphs of them
        /// for the CPU of a few launches. A GPU-bound client whose grid fills every SM
        /// waits at most this long for the SM our kernel holds (docs/benchmarks.md,
        /// "Live services"). 0 launches the same bursts as without MPS.
        pub mps_kernel_us: u64 = 50, ZeroOr(10, 100_000), restart;
        /// The spin kernel.
        pub kernel: SpinKernel = SpinKernel::Sleep, Named, restart,
            flag("--kernel", "KERNEL", "The spin kernel");
    }
}

settings_table! {
    /// `[yield]`: when to stand aside.
    pub struct YieldingSettings in "yield." {
        /// Which yield policy decides when to stand aside.
        pub policy: YieldPolicyChoice = YieldPolicyChoice::Activity, Named, live;
        /// MPS co-residence: under MPS gpufill never yields; it fills only the gap
        /// others leave.
        pub mps: MpsChoice = MpsChoice::Auto, Named, live;
        /// Seconds to stay idle after the last foreign process has gone.
        pub grace_s: f64 = 5.0, Range(0.0, 86400.0), live,
            flag("--grace", "SECS", "Seconds to stay idle after the last foreign process left");
        /// `activity` only: seconds a listed process must have run no kernel before
        /// gpufill fills beside it.
        pub idle_grace_s: f64 = 30.0, Range(0.0, 86400.0), live;
        /// `activity` only: beside a process that works, once it has been listed for
        /// `idle_grace_s`: `hold_off` (fill beside it only while it is dormant) or
        /// `fill_gaps` (fill the gaps its work leaves, one short kernel at a time, at an
        /// estimated cost to it of at most `max_cost_percent`).
        pub beside_live: BesideLive = BesideLive::HoldOff, Named, live,
            flag("--beside-live", "MODE", "Beside live work without MPS: hold_off or fill_gaps");
        /// `fill_gaps` only: the most gpufill may cost live work, percent, as it
        /// estimates from its own kernels' timing.
        pub max_cost_percent: f64 = 2.0, Range(0.0, 100.0), live,
            flag("--max-cost", "PCT", "fill_gaps: the most it may cost live work, percent");
        /// PIDs that never count as foreign.
        pub ignore_pids: Vec<u32> = Vec::new(), Pids, live;
        /// Process names (last path component) that never count as foreign.
        pub ignore_names: Vec<String> = Vec::new(), Names, live;
        /// Drop the CUDA context after yielding for `release_after_s`, so a yielding
        /// gpufill holds no GPU memory; it is created again on resume.
        pub release_context: bool = false, Plain, live;
        /// Seconds of yielding before the context is dropped.
        pub release_after_s: f64 = 60.0, Range(0.0, 86400.0), live;
    }
}

settings_table! {
    /// `[probe]`: faults of the measurement, and lost GPUs.
    pub struct ProbeSettings in "probe." {
        /// Seconds a failing probe is trusted (the last load held) before the loop
        /// idles.
        pub fault_hold_s: f64 = 2.0, Range(0.0, 3600.0), live;
        /// Seconds before the first attempt to reopen a lost GPU; doubles after every
        /// failed attempt.
        pub retry_initial_s: f64 = 1.0, Range(0.01, 3600.0), restart;
        /// The longest wait between attempts to reopen a lost GPU; at least
        /// `retry_initial_s`.
        pub retry_max_s: f64 = 300.0, Range(0.01, 86400.0), restart;
    }
}

settings_table! {
    /// `[schedule]`: the idle rule and daily windows. Precedence: a matching window (the
    /// first listed), then the idle rule, then `target_percent`.
    pub struct ScheduleSettings in "schedule." {
        /// Seconds without foreign processes after which `idle_target_percent` holds; 0
        /// turns the idle rule off. At most 30 days.
        pub idle_after_s: f64 = 0.0, Range(0.0, 2_592_000.0), live;
        /// The target after `idle_after_s` without foreign processes, percent.
        pub idle_target_percent: f64 = 60.0, Range(0.0, 100.0), live;
        /// Daily windows in local time with their own target (`[[schedule.window]]`).
        pub windows as "window": Vec<WindowSettings> = Vec::new(), Windows, live;
    }
}

/// What the loop holds at the target (`metric`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Metric {
    /// NVML's utilization (share of time with a kernel resident): duty at a fixed width.
    #[default]
    Util,
    /// GPM's SM utilization (share of SMs busy; Hopper or later): width and duty.
    Sm,
}

/// The yield policy (`yield.policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum YieldPolicyChoice {
    /// `"presence"`: idle while any other compute process is on the GPU, even one that
    /// only holds a context. Its newcomers' first kernels and a holder's next kernel
    /// never meet ours, but a GPU held all day by a quiet service stays idle.
    Presence,
    /// `"activity"` (the default): idle while another process works, and until a
    /// newcomer has been quiet for `idle_grace_s`; then fill beside it once a probe
    /// finds it dormant, holding off at its first sign of life
    /// (docs/benchmarks.md, "Beside a mostly-idle service").
    #[default]
    Activity,
}

/// MPS co-residence (`yield.mps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MpsChoice {
    /// MPS mode while an MPS control daemon runs: `gpufill run` follows it, starting
    /// afresh when one starts or stops.
    #[default]
    Auto,
    /// Always MPS mode (never yield).
    On,
    /// Never MPS mode: the yield policy applies even under MPS.
    Off,
}

gpufill_core::named_choice!(Metric { Util => "util", Sm => "sm" });
gpufill_core::named_choice!(YieldPolicyChoice { Presence => "presence", Activity => "activity" });
gpufill_core::named_choice!(MpsChoice { Auto => "auto", On => "on", Off => "off" });
