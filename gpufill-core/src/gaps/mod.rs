//! Filling the gaps of live work without MPS, at a cost the user bounds
//! (`yield.beside_live = "fill_gaps"`): what our kernels charge a live job, estimated
//! from their own timing, and the rate control that holds that estimate under the bound
//! ([`GapCost`]).
//!
//! # The physics
//! Measured on H200s (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps):
//! without MPS the GPU runs one context at a time. A job's kernel that arrives while one
//! kernel of ours runs waits the rest of it and one context switch (136 us); one that
//! arrives while kernels of ours are queued back to back waits out a time slice (about
//! 2 ms), whatever their length. A job whose context was not the last one on the GPU
//! pays the switch even when ours is idle. So gpufill fills gaps with one short kernel
//! at a time ([`crate::LaunchShape::Gaps`]), an idle gap longer than the switch after
//! each (so the job gets in at the end of our kernel), and every time the job meets our
//! context it pays about a switch and half a kernel.
//!
//! # What our kernels see, and what it costs
//! A kernel of ours that finds the job's context on the GPU (it starts late, is held
//! back or cut short) is a **meeting**, and a sign of the job's work. A job's work is
//! not one block: a launch-bound training step or a decode request is mostly host-side
//! gaps between short kernels (measured with `scripts/gap_trace.py`: a ResNet-18 step
//! busy 5.9 ms of a 20 ms span, with gaps of up to 2.7 ms; a GPT-2 request busy 23 ms of
//! 310 ms). Signs less than the shortest hold apart are one **spell**; the pacer
//! ([`GapPacer`]) learns how long spells last and how often they come, and after each
//! sign launches nothing for the rest of the spell as learned (and at least the hold
//! this module sets), so that our kernels stay out of the job's inner gaps: each kernel
//! of ours there costs the job's next kernel a switch.
//!
//! A spell goes on while nothing shows the job idle: signs with no clear kernel of ours
//! between them are one spell (`UNBROKEN_MERGE`). Its start counts as seen (a sample
//! of the period) only where our kernel before it was judged just before; a sign right
//! after a look (a probe pair's "nobody", which is not believed) shows the job at work,
//! not since when. The pacer predicts only a job idle a third of its period or more
//! (`PREDICT_IDLE`): a service's queued requests come nearly back to back, and
//! predicting them would hold off through requests that never come.
//!
//! A spell's length is learned only where its end was seen: the clear kernel after its
//! last sign came as soon as the pacer looks at a spell itself, not put off by a hold
//! longer than the spell (then it is a lower bound, and the length learned stands for
//! its time at work, where its start was seen or predicted; a spell seen only after
//! others, somewhere in a wait of ours, stands for what was seen of it). Before any
//! length is learned, a spell longer than `FIRST_LOOKS`
//! is looked at less and less often, so that a service's first long requests are not
//! met every shortest hold.
//!
//! Where the job is idle and should stay so for a while, our kernels are stretched
//! ([`GapPacer::kernel_for`]): to [`PREDICTED_STRETCH`] between spells the pacer
//! predicts at least ten such kernels apart, to [`STRETCH_KERNEL`] between spells
//! predicted closer together or between spells of [`STRETCH_FOR_SPELLS`] or more.
//! Short kernels and their gaps hold at most 40 % of the GPU.
//!
//! Each meeting is charged a switch and half the kernel it met; a kernel of ours held
//! back behind the job's queued work got in only at the end of the job's time slice or
//! kernel, so it is charged two switches and a whole kernel more ([`GapCost::charge`]).
//!
//! The estimate is what that charge is worth against the job's time at work: its spells
//! as our kernels saw them, or NVML's utilization less our kernels' share where that is
//! more (a job of isolated sub-millisecond requests shows spells of no length), at least
//! 1 % of a sample that has a charge. That is the slowdown of the job's work while it
//! works: of a request's latency (a decode request is one spell). For a job on a clock
//! (a trainer whose period the pacer predicts) it is weighed against all the time
//! instead: its step rate pays for our kernels, the wait on its input included. Only
//! where NVML shows the job at work for a fair share of the time its predicted spells
//! take: a period found among requests that come at random is no clock. The charges and
//! the job's time at work are each smoothed over the samples, and the estimate is their
//! ratio: a sample in which the job did nothing adds no charge and counts the job at
//! 0.1 % of it. (Up to 4aea6c4 the estimate smoothed each sample's own cost, so those
//! samples counted as costing nothing against 1 % of the time: beside a request a
//! second, four samples in five, and the simulator's services of 1 to 5 requests a
//! second paid over the bound while the estimate read under it: docs/benchmarks.md.)
//!
//! # Rate control
//! At every NVML sample the estimate is updated and the hold adjusted by that sample: its
//! logarithm moves in proportion to how far the sample's charge is from 0.8 of the bound
//! times the job's time at work in it, against 0.8 of the bound times the job's smoothed
//! time at work, twice as fast up as down (integral control, [`GapCost`]), between
//! [`MIN_HOLD`] and [`MAX_HOLD`]. So the charges settle under 0.8 of the bound of the
//! job's time at work whatever share of the samples has a meeting (about half the bound
//! beside isolated requests), a fill that starts beside a job it costs much is held off
//! within a second, a job that costs less at the shortest hold keeps it, and a sample
//! in which the job did nothing shortens the hold only a little, where the job usually
//! shows more than the floor. (A job that never does, a request a second of 0.2 ms, is
//! counted at the floor in every sample, and is met more often than the bound allows:
//! docs/benchmarks.md, "Filling the gaps of live work".) A longer hold fills fewer of
//! the job's gaps, so fewer of its busy spells meet our context: a service of
//! sub-millisecond requests, each of which pays about a third of its length for a
//! meeting, is filled beside only rarely, while a trainer whose steps are milliseconds
//! long keeps most of its gaps filled. (Up to e18b116 the hold grew by half at a sample
//! over the bound and shrank by a sixth at each one under 0.9 of it: beside isolated
//! requests, whose meeting samples cost several times the bound and come one in five,
//! that settled with the estimate at about twice the bound.)

use std::time::Duration;

mod cost;
mod pacer;

pub use cost::{GapCost, Weighed, WeighedBy};
pub use pacer::GapPacer;

/// One context switch between two contexts, as measured on H200s
/// (docs/benchmarks.md#time-slicing-between-two-contexts-the-physics-of-filling-gaps).
pub const CONTEXT_SWITCH: Duration = Duration::from_micros(136);

/// The shortest idle gap after each kernel of ours while filling gaps: longer than a
/// switch, so a job that is ready gets the GPU at the end of our kernel instead of our
/// next launch winning the race (it won most of them with 20 us gaps: the same section).
pub const MIN_GAP: Duration = Duration::from_micros(150);

/// The length of each kernel of ours while filling gaps: long enough that a job's
/// kernel which finds the GPU ready at its end gets in before our next launch (at 10-25
/// us kernels our next one won most races), short enough that a job's kernel arriving
/// during one waits little (half of it on average).
pub const GAP_KERNEL: Duration = Duration::from_micros(100);

/// The length of each kernel of ours between the spells of a job whose spells are long
/// ([`STRETCH_FOR_SPELLS`]) and come when they come (a decode service's requests): a
/// request that comes while one runs waits what is left of it (charged as half the
/// difference from a short one, [`GapReport::long_wait`]). Short kernels and their gaps
/// hold at most 40 % of the GPU.
pub const STRETCH_KERNEL: Duration = Duration::from_micros(500);

/// The length of each kernel of ours where the pacer predicts the job idle for a while
/// yet ([`GapPacer::kernel_for`]): between a spell seen to end and a guard before the next
/// predicted one (a trainer's step, on a clock), where the predicted gaps hold ten of
/// them (shorter ones keep [`STRETCH_KERNEL`]). Longer than [`STRETCH_KERNEL`] because
/// the launcher's CPU goes with its kernels (two timed wake-ups and seven driver calls
/// each: docs/benchmarks.md, "CPU while filling gaps") and these fill most of the GPU;
/// a trainer meets few of them (the one that comes early waits 250 us more). Not for jobs
/// whose work comes when it comes: beside the simulator's service of 20 ms requests a
/// second apart on average, 1 ms kernels there put the median request over the bound.
pub const PREDICTED_STRETCH: Duration = Duration::from_millis(1);

/// A job whose spells last at least this long pays at most 1 % more of one for meeting a
/// stretched kernel of ours instead of a short one (half the difference, 200 us): the
/// pacer stretches its kernels between such a job's spells even where it predicts none
/// (a decode service's requests, which come when they come), once a spell is seen to end.
pub const STRETCH_FOR_SPELLS: Duration = Duration::from_millis(20);

/// The shortest hold after a meeting.
pub const MIN_HOLD: Duration = Duration::from_millis(5);

/// The longest hold after a meeting: a minute, so that beside a request a second whose
/// every meeting costs it a large share of its length, at most a few in a hundred are
/// met (at 10 s, one in ten: the simulator's 1/s of 0.87 ms paid 3.2 % on the mean).
pub const MAX_HOLD: Duration = Duration::from_secs(60);
/// What a load source saw while filling gaps ([`crate::LaunchShape::Gaps`]) since it was
/// last asked ([`crate::LoadSource::gaps_seen`]); the pacer's reports
/// ([`GapPacer::kernel_done`]) added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GapReport {
    /// Kernels of ours that ran.
    pub kernels: u32,
    /// The GPU time they asked for: short kernels and stretched ones.
    pub ours: Duration,
    /// Meetings: kernels of ours that met the job (started late, held back, cut short
    /// or ran long), and the kernels of ours launched inside a spell of its work before
    /// one; each costs the job about a switch.
    pub met: u32,
    /// Of the kernels that met it, those held back behind its queued work: they got in
    /// at the end of its time slice or kernel, in the middle of its work.
    pub held_back: u32,
    /// What the meetings of a stretched kernel of ours ([`STRETCH_KERNEL`],
    /// [`PREDICTED_STRETCH`]) cost the job beyond meeting a short one: half the
    /// difference each. The job came earlier than the pacer predicted, and waited more
    /// of our kernel.
    pub long_wait: Duration,
    /// The job's time at work, as our kernels saw its spells (from each spell's first
    /// sign to its last), counted when a spell ends.
    pub job_time: Duration,
    /// The job's clock, while the pacer predicts its spells: its work comes on a clock
    /// (a training step and its wait on its input), and what our kernels charge it is a
    /// share of its rate.
    pub clock: Option<Clock>,
}

/// A job's clock as the pacer predicts it ([`GapReport::clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// From one spell's start to the next's.
    pub period: Duration,
    /// How long each spell lasts.
    pub spell: Duration,
}

impl Clock {
    /// The share of the time the job is predicted at work.
    pub fn busy_share(self) -> f64 {
        self.spell.as_secs_f64() / self.period.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

impl std::ops::Add for GapReport {
    type Output = GapReport;

    /// What two reports saw together.
    fn add(self, other: GapReport) -> GapReport {
        GapReport {
            kernels: self.kernels + other.kernels,
            ours: self.ours + other.ours,
            met: self.met + other.met,
            held_back: self.held_back + other.held_back,
            long_wait: self.long_wait + other.long_wait,
            job_time: self.job_time + other.job_time,
            clock: other.clock.or(self.clock),
        }
    }
}

impl std::ops::AddAssign for GapReport {
    fn add_assign(&mut self, other: GapReport) {
        *self = *self + other;
    }
}
/// How a kernel of ours ended, as the gap filler judges it ([`GapPacer::kernel_done`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOutcome {
    /// It ran as asked: nobody ran since our previous kernel ended.
    Clear,
    /// It started a context switch late, and then ran: the job ran since our previous
    /// kernel ended (somewhere between its end and this launch) and had no work queued
    /// at this launch.
    AfterOthers,
    /// The job's work cut it short or came between: the job works now.
    Busy,
    /// It waited behind the job's queued work (got in at the end of a time slice, or of
    /// the job's kernel): the job works now, and our kernel ran in the middle of it.
    HeldBack,
}

impl KernelOutcome {
    /// Whether it shows the job's work since our previous kernel.
    pub fn met(self) -> bool {
        self != KernelOutcome::Clear
    }
}
