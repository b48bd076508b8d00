//! The control core of gpufill: it holds a GPU's utilization at a target with a tiny
//! kernel and stands aside the moment anyone else uses the GPU.
//!
//! This crate knows no GPU. It defines what it needs from one as two traits, [`Probe`]
//! (measure: utilization and foreign processes; two required methods, three with
//! defaults) and [`LoadSource`] (apply a duty cycle and a width; one required method,
//! the rest defaults for what a source may also do: launch from the loop's thread,
//! release, change shape, report what its kernels saw, probe, fill gaps), and
//! implements the logic over them:
//!
//! - [`controller`]: pure arithmetic from measured and target utilization to duty
//!   ([`PiController`], and the original tool's [`WindowRule`] for comparison);
//! - [`policy`]: when to yield to other processes; it is asked first and always wins;
//! - [`schedule`]: the target by time of day and quiet time (pure, time passed in);
//! - [`fill`]: the loop, a state machine stepped once per tick ([`FillLoop::step`]
//!   returns a [`Tick`]), built by one recipe ([`LoopSettings`], [`FillLoop::build`]);
//! - [`drive`](mod@drive): the one driver that steps every loop on its tick grid;
//! - [`gaps`]: filling the gaps of live work without MPS (the cost estimate, the pacer);
//! - [`supervise`]: reopens a stopped loop with exponential backoff (a lost GPU);
//!   [`ratelimit`]: one warning line, then one summary a minute, for repeated faults;
//! - [`shaper`]: turns the controller's output into a duty and a width; with the `sm`
//!   metric it picks the width by a [`PowerModel`];
//! - [`time`]: time is always passed in; [`SystemClock`] is the only real clock;
//! - [`kernel_timing`]: what our own kernels' timing shows of other contexts, and what
//!   is only the host's jitter ([`OthersSign`]);
//! - [`unlisted`]: other GPU users that the process list misses inside a PID namespace
//!   of our own ([`PidView`]), seen by device memory, per-process samples and
//!   utilization beyond our own load.
//!
//! The simulated GPU, calibrated on the measurements in docs/benchmarks.md, on which every behaviour
//! is tested in virtual time, is the crate `gpufill-sim`, built on this one's public API.
//!
//! Errors from devices are classified by [`DeviceError::kind`] (transient, unsupported,
//! lost) so the loop retries or stops without naming NVML or CUDA.
//!
//! # Where things are decided
//! - **The control law**: [`PiController`] (its `update`, and why it is shaped so in the
//!   module docs of `src/controller/pi.rs`), run by the loop on new samples only.
//! - **The yield rule**: [`YieldPolicy::decide`] in [`policy`], asked first at every step.
//! - **The loop**: [`FillLoop::step`] in [`fill`], one per tick, returning a [`Tick`].

#![forbid(unsafe_code)]

// First, so that every module below may name `named_choice!` (textual scope).
#[macro_use]
pub mod names;
pub mod backoff;
pub mod controller;
pub mod device;
pub mod drive;
pub mod fill;
pub mod gaps;
pub mod hint;
pub mod kernel_timing;
pub mod policy;
pub mod ratelimit;
pub mod reopen;
pub mod schedule;
pub mod shaper;
pub mod supervise;
pub mod time;
pub mod units;
pub mod unlisted;

pub use backoff::Backoff;
pub use controller::{Controller, ControllerKind, PiController, PiGains, WindowRule};
pub use device::{DeviceError, ErrorKind, LaunchShape, LoadSource, Probe, ProcessInfo};
pub use drive::{Driven, drive};
pub use fill::{Event, FillLoop, FillSettings, Loop, LoopSettings, State, Tick};
pub use gaps::{GapCost, GapPacer, GapReport, KernelOutcome};
pub use hint::{Hint, HintsAt, NoHint};
pub use kernel_timing::{GroupTiming, OthersSign, StartChain};
pub use policy::{BesideLive, Decision, YieldMode, YieldPolicy, YieldSettings};
pub use ratelimit::RateLimiter;
pub use reopen::{ReopenError, ReopenSettings, Reopening};
pub use schedule::{IdleRule, Schedule, TimeOfDay, Window};
pub use shaper::{PowerModel, Shaper, Shaping, SmShaping};
pub use supervise::{RetrySettings, Supervised, Supervisor, SupervisorEvent};
pub use time::{Clock, SystemClock, Time, TimeRangeError, VirtualClock};
pub use units::{Duty, Load, RangeError, Utilization, Width};
pub use unlisted::{MemoryReading, OwnShare, PidView, UnexplainedMemory, Unlisted};
