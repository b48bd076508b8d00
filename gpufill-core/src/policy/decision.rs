//! What the yield rule answers ([`Decision`]) and how it is set ([`YieldMode`],
//! [`YieldSettings`]), with the two waits it owns: [`BURST_HOLD`] and [`live_hold`].

use std::time::Duration;

use crate::kernel_timing::OthersSign;

/// How long gpufill stays idle after a kernel of ours showed that someone nobody lists
/// ran on an otherwise empty GPU ([`Seen::held_back`](crate::policy::Seen::held_back) with nobody listed: a graphics
/// client, a process in another container, a newcomer about to be listed), unless a
/// quiet sample ([`Seen::quiet_sample`](crate::policy::Seen::quiet_sample)) ends it sooner.
pub const BURST_HOLD: Duration = Duration::from_millis(500);

/// How long a late start of ours alone (a weak sign: the host's own jitter can fake it)
/// pauses gpufill beside quiet holders before a probe confirms it (`policy/holders.rs`):
/// the probe then asks whether anyone ran since that kernel. Long enough that a service
/// answering one request a second is found again (a Poisson one misses the window
/// 0.7 % of the time), short against the idle grace that a false sign would cost.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(5);

/// The longest [`live_hold`] grows to, in multiples of the idle grace.
pub const LIVE_HOLD_MAX_FACTOR: u32 = 8;

/// How long gpufill holds off a holder that showed life before probing it again: the
/// idle grace after the first sign, the idle grace again after the first probe that
/// found it still working, then twice as long after each further one in a row (`lates`
/// probes in a row), up to [`LIVE_HOLD_MAX_FACTOR`] idle graces. A live service is
/// probed ever more rarely (each probe can cost its next request one context switch).
/// A notebook's cell keeps running after the kernel of ours that saw its start, so the
/// first probe finds it too: it is filled beside again two idle graces after the cell
/// began (longer if the cell outlasts them).
pub fn live_hold(idle_grace: Duration, lates: u32) -> Duration {
    let factor = 1u32 << lates.saturating_sub(1).min(LIVE_HOLD_MAX_FACTOR.ilog2());
    idle_grace.saturating_mul(factor)
}

/// What the policy decided for this tick, with the evidence it decided on.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nobody else is here: fill.
    Fill {
        /// A sign our kernels showed that nobody can explain: nobody is listed, and the
        /// device would show anyone there (the host's PID view, or device memory inside
        /// a namespace). It is the host's own jitter, and nothing pauses for it.
        unexplained: Option<OthersSign>,
    },
    /// Others hold a context but are quiet (activity mode, past the idle grace): fill
    /// beside them in [`crate::LaunchShape::OneInFlight`], so that their next kernel
    /// waits at most one short kernel of ours.
    FillBeside,
    /// Activity mode: a holder past its idle grace showed life (a kernel of ours
    /// started late or was preempted, a sample beyond our own load, its per-process
    /// samples, a probe that found work), or a probe is not yet clean: idle for
    /// [`live_hold`], then probe. Also a short idle ([`BURST_HOLD`]) on a GPU nobody
    /// lists, when a kernel of ours showed someone there.
    Pause {
        /// PIDs of the listed foreign processes present (any of them may be the one).
        pids: Vec<u32>,
        /// A foreign process that the list does not show is present.
        unlisted: bool,
        /// What our kernels' timing showed, when that was the evidence; `None` when
        /// NVML showed the work (samples, utilization beyond ours), a probe found it,
        /// or a hold goes on.
        sign: Option<OthersSign>,
    },
    /// Activity mode: everyone present has been quiet for the idle grace (or a hold
    /// has ended): ask the load source whether anyone ran on the GPU since our
    /// previous kernel ([`crate::LoadSource::probe`]) and hand the answer to
    /// [`YieldPolicy::probed`](crate::policy::YieldPolicy::probed), which decides.
    Probe,
    /// Activity mode with `beside_live = "fill_gaps"`: everyone present has been
    /// listed for the idle grace, working or not: fill the gaps their work leaves
    /// ([`crate::LaunchShape::Gaps`]), at the cost the loop bounds
    /// ([`crate::gaps::GapCost`]).
    FillGaps {
        /// PIDs of the listed foreign processes present.
        pids: Vec<u32>,
    },
    /// Someone else is here (their PIDs, or one without a PID), or left less than the
    /// grace ago (no PIDs, `unlisted` false).
    Yield {
        /// PIDs of the listed foreign processes that cause it.
        pids: Vec<u32>,
        /// A foreign process that the list does not show causes it (inside a PID
        /// namespace of our own: seen by memory, samples or utilization).
        unlisted: bool,
    },
}

impl Decision {
    /// Nobody else is here, and nothing unexplained was seen.
    pub const FILL: Decision = Decision::Fill { unexplained: None };

    /// Whether the decision is to fill.
    pub fn is_fill(&self) -> bool {
        matches!(
            self,
            Decision::Fill { .. } | Decision::FillBeside | Decision::FillGaps { .. }
        )
    }

    /// How many foreign processes cause the decision (one for an unlisted presence).
    pub fn foreign_count(&self) -> usize {
        match self {
            Decision::Fill { .. }
            | Decision::FillBeside
            | Decision::FillGaps { .. }
            | Decision::Probe => 0,
            Decision::Yield { pids, unlisted } | Decision::Pause { pids, unlisted, .. } => {
                pids.len() + usize::from(*unlisted)
            }
        }
    }
}

/// When a foreign process makes gpufill idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum YieldMode {
    /// While it is listed at all.
    #[default]
    Presence,
    /// While it works, and until it has been quiet for `idle_grace`.
    Activity {
        /// How long a listed process must have run no kernel before gpufill fills beside it.
        idle_grace: Duration,
    },
    /// Under MPS: kernels of MPS clients run together with ours (what that costs a job:
    /// docs/benchmarks.md#under-mps-scriptsinterferencepy-with-an-mps-control-daemon), so gpufill stays on beside them and its
    /// controller, which reads total device utilization, fills only the gap others leave.
    /// A listed process that is not a client of the MPS server time-slices with us as
    /// without MPS: gpufill yields to it as `Presence` does, with the grace.
    Mps,
}

/// What activity mode does beside a holder that works, once it is past its idle grace
/// as a newcomer (`yield.beside_live`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BesideLive {
    /// Hold off while it works, fill beside it only while it is dormant.
    #[default]
    HoldOff,
    /// Fill the gaps its work leaves, one short kernel at a time, at a cost bounded by
    /// `yield.max_cost_percent` ([`crate::gaps`]).
    FillGaps,
}

crate::named_choice!(BesideLive { HoldOff => "hold_off", FillGaps => "fill_gaps" });

/// Settings of [`YieldPolicy`](crate::policy::YieldPolicy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YieldSettings {
    /// The mode.
    pub mode: YieldMode,
    /// How long to stay idle after the last (working) foreign process has gone.
    pub grace: Duration,
    /// Beside a holder that works, in activity mode: hold off, or fill its gaps.
    pub beside_live: BesideLive,
    /// PIDs that never count as foreign (monitoring agents, another gpufill).
    pub ignore_pids: Vec<u32>,
    /// Process names that never count as foreign, matched against the last path
    /// component of the name NVML reports.
    pub ignore_names: Vec<String>,
}

impl Default for YieldSettings {
    fn default() -> Self {
        YieldSettings {
            mode: YieldMode::Presence,
            grace: Duration::from_secs(5),
            beside_live: BesideLive::HoldOff,
            ignore_pids: Vec::new(),
            ignore_names: Vec::new(),
        }
    }
}
