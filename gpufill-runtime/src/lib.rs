//! gpufill's runtime: fill a machine's GPUs at a target utilization with almost no GPU
//! memory, and stand aside the moment real work arrives. Embed it in a node agent, a
//! training launcher or a monitoring daemon; the `gpufill` binary is a thin layer of
//! flags, TOML, signals and HTTP over it.
//!
//! ```no_run
//! use gpufill_runtime::{Agent, AgentOptions, Settings};
//!
//! let agent = Agent::on_this_machine(
//!     Settings { target_percent: 40.0, ..Settings::default() },
//!     AgentOptions::default(),
//! )?;
//! // ... agent.snapshots(), agent.update(new_settings), then:
//! agent.stop();
//! agent.join()?;
//! # Ok::<(), gpufill_runtime::AgentError>(())
//! ```
//!
//! # Pieces
//! - [`Settings`]: everything gpufill is told, one field per config key
//!   (`yield.grace_s` is `settings.yielding.grace_s`), each defined once with its
//!   default and rule; [`Settings::default`] is the product's defaults,
//!   [`Settings::validate`] holds every rule; with the feature `serde`, a serde value
//!   with the file's keys and messages (module `file`).
//! - [`select()`] lists and selects GPUs (by index, UUID or all; MIG skipped) and matches
//!   NVML to CUDA by UUID; [`open_gpu`] opens one for filling.
//! - [`Agent`]: one supervised worker per GPU ([`Agent::start`] with any [`Opener`], or
//!   [`Agent::on_this_machine`]); it takes new settings live ([`Agent::update`], from any
//!   thread), gives a [`GpuSnapshot`] per GPU (its [`State`], its [`Liveness`], judged
//!   by a [`LivenessWatch`] without the process's own pauses), stops, and joins, naming
//!   each worker that failed ([`WorkerError`]). With [`AgentOptions::claim_dir`] it
//!   claims its GPUs first ([`claim_all`]), so a second gpufill on one is refused
//!   ([`ClaimError`]); a GPU whose lock something else holds waits for it alone
//!   ([`Claimed::Waiting`]) while the others fill.
//! - [`Steering`]: what a worker does around each step (new settings, the schedule on
//!   the local clock, snapshots), for callers that drive a loop themselves.
//! - [`mps::daemon_running`], [`mps::DaemonWatch`] and [`mps::Restart`] (following a
//!   daemon by starting afresh); [`prometheus::render`], the snapshots as Prometheus text
//!   (here rather than in the binary so an embedder serves the same series from its
//!   own HTTP server). The types of the lower crates these name are re-exported here, so
//!   an embedder of the agent needs no other crate.
//! - [`reload::Reload`]: a settings file's reload without its I/O: when a file being
//!   written is complete, then propose and commit (the binary's SIGHUP reload); with
//!   [`reload::FileWatch`], the inotify watch on the file's writers, and
//!   [`reload::ReloadStatus`], the outcome as Prometheus series.
//! - [`SimOpener`]: the simulated GPU as an [`Opener`], for an agent on a machine with no
//!   GPU (its model, `SimConfig` and `ForeignJob`, is the crate `gpufill-sim`, which
//!   needs no GPU crate; this one builds on it); [`mps::SimDaemon`] and
//!   [`mps::MpsFollower`], a simulated run's MPS daemon followed by the real watch.
//! - [`simulate::SimRun`]: a simulated run in virtual time, its table's
//!   [`simulate::Rows`] and its [`simulate::Report`] (`gpufill simulate`);
//!   [`bench::measure`]: a bench over any [`bench::Rig`] (the real [`bench::RealRig`] or
//!   the simulated [`bench::SimRig`]), its [`bench::BenchSummary`], table, CSV and plot
//!   ([`bench::svg`]) (`gpufill bench`); [`status::MachineStatus`]: the GPUs, their
//!   processes and MPS as NVML alone shows them, and as text (`gpufill status`).
//!
//! # Where things are decided (each one hop from here)
//! - **The control law**: [`gpufill_core::controller`] (the PI controller with
//!   feed-forward, `gpufill_core::controller::PiController`), run by
//!   [`gpufill_core::FillLoop::step`].
//! - **The yield rule**: [`gpufill_core::policy`] (`YieldPolicy::decide_seen`, a rule per
//!   mode: `presence`, `activity`, MPS), asked first at every step; it always wins over
//!   the controller.
//! - **The kernel**: [`gpufill_cuda`] (a one-warp spin kernel on `%globaltimer`,
//!   launched in bursts from the loop's own thread).
//! - **A config key**: the [`Settings`] field of the same name, whose docs give its
//!   unit, default and rule (its one line is in `src/settings/defaults.rs`); one of [`Settings::fill_settings`], [`Settings::yield_settings`],
//!   [`Settings::schedule`], [`Settings::launcher_settings`] turns it into the core's
//!   setting. `yield.grace_s` is `settings.yielding.grace_s`, which
//!   [`Settings::yield_settings`] makes [`gpufill_core::YieldSettings::grace`]; the whole
//!   path from the TOML file: `docs/ARCHITECTURE.md`, "Where a config key lands".
//!
//! # What an embedder may rely on
//! See `docs/ARCHITECTURE.md`, "API boundary": the items re-exported at this root and the
//! public modules `mps`, `prometheus`, `reload`, `simulate`, `bench`, `status` and `file` are the
//! API. There is no hidden module: what the `gpufill` binary uses beyond the agent is
//! public here because an embedder's own front end or loop needs it too (each key's name,
//! restart need and flag as data: [`Settings::every_key`], [`Key`], [`Flag`],
//! [`FlagValue`]; the real loop [`open_gpu`] returns, [`RealLoop`], with its
//! [`DeviceOpenHint`]; the local clock of schedules, [`local_time_of_day`]; the claim's
//! rule for a gpufill process, [`is_gpufill`], and [`escape_controls`] for text another
//! process sets). Nothing here reads a configuration file, installs a signal handler or a
//! log subscriber, or exits the process. Logging goes through `tracing`.

mod agent;
pub mod bench;
mod claim;
mod device_hint;
mod faultlog;
mod gpm;
mod gpus;
mod liveness;
mod localtime;
pub mod mps;
mod open;
mod opener;
pub mod prometheus;
pub mod reload;
mod select;
mod settings;
pub mod simulate;
mod snapshot;
pub mod status;
mod steering;
mod worker;

pub use agent::{Agent, AgentError, AgentOptions};
pub use claim::{
    CLAIM_DIR, Claim, ClaimError, Claimed, claim_all, claim_gpu, escape_controls, is_gpufill,
};
pub use device_hint::DeviceOpenHint;
pub use gpm::GpmError;
pub use gpufill_core::Loop;
pub use gpus::{GpuId, GpuSelector};
pub use liveness::LivenessWatch;
pub use localtime::now as local_time_of_day;
pub use open::{OpenError, RealLoad, RealLoop, open_gpu};
pub use opener::{NvmlCuda, Opener, SimOpener, with_launch_settings};
pub use select::{Gpu, SelectError, Selection, choose, select};
pub use settings::{
    Chosen, Flag, FlagValue, Key, LoadSettings, Metric, MpsChoice, ProbeSettings, RESTART_KEYS,
    ScheduleSettings, Settings, SettingsError, WindowSettings, YieldPolicyChoice, YieldingSettings,
};
pub use snapshot::{
    GpuLabels, GpuSnapshot, Liveness, Publisher, Registry, STARTUP_ALLOWANCE, down_of, stall_after,
};
pub use steering::{DayClock, DeviceReadings, Steering};
pub use worker::WorkerError;

/// The types of the lower crates that the items above name, so that an embedder needs
/// no other dependency: what a snapshot's state is, the controller and kernel a
/// [`Settings`] chooses, a schedule window's time of day, the agent's timeline, the PID
/// view a [`prometheus::Process`] reports, the errors an [`AgentError`] carries, and a
/// [`status::MachineStatus`]'s GPUs and their processes.
pub use gpufill_core::{ControllerKind, PidView, State, Time, TimeOfDay};
pub use gpufill_cuda::{CudaError, SpinKernel};
pub use gpufill_nvml::{GpuInfo, ProbeError, ProcessEntry, pid_view};

/// Settings in a file (feature `serde`): [`Settings`] and each of its tables are serde
/// values whose keys are the file's, read by the keys' own rules (so a file gets the
/// same messages as [`Settings::validate`], at the value's place). For a file with
/// tables of its reader's own beside the settings (the `gpufill` binary's `[metrics]`):
/// [`file::KeyOf`] reads a key among both, [`file::Table::read_value`] a setting's
/// value, [`file::TableOf`] the reader's table.
#[cfg(feature = "serde")]
pub mod file {
    pub use crate::settings::file::{KeyOf, Table, TableOf};
}
