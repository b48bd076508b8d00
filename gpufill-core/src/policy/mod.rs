//! Yield policies: when to stand aside for other processes.
//!
//! Without MPS the GPU time-slices between processes, so any kernel of ours that is
//! resident while another process wants to run slows it markedly (measured at 50 % duty:
//! docs/benchmarks.md#the-gpu-itself-measured-before-gpufill-probes). The only way to cost nothing is to be idle whenever anyone else is
//! on the GPU. The loop asks the policy before the controller, and the policy wins.
//!
//! Three modes:
//! - [`YieldMode::Presence`]: idle while any other compute process is listed, even one
//!   that only holds a context, and for `grace` after the last one left.
//! - [`YieldMode::Activity`] (the product's default): a process counts as working from
//!   the moment it is listed and whenever the device shows work of it; once everyone
//!   present has shown none for `idle_grace`, gpufill asks the load source for a
//!   **probe** ([`Decision::Probe`], [`crate::LoadSource::probe`]): whether any other
//!   context has run on the GPU since our previous kernel, however long ago (without MPS
//!   our first kernel after someone else's work starts a context switch late). Only a
//!   clean probe lets gpufill fill beside them ([`Decision::FillBeside`]): a holder is
//!   *dormant*. At the first sign of life (a kernel of ours started late or was
//!   preempted, a sample beyond our own load, its per-process samples) it pauses
//!   ([`Decision::Pause`]) and **holds** for `idle_grace`, then probes again; a probe
//!   that finds work again holds longer each time ([`live_hold`]: a service answering
//!   even one request a second is live, and each probe costs its next request at most
//!   one context switch). NVML cannot see such a service at all.
//! - [`YieldMode::Mps`]: kernels of MPS clients run together with ours; only processes
//!   outside the MPS server are yielded to, as in presence mode.
//!
//! # Processes the list does not show
//! Inside a PID namespace of our own NVML lists only our namespace's processes
//! ([`crate::unlisted`]). What the device still shows of the others comes in a [`Seen`]:
//! memory beyond the listed processes ([`Unlisted::Memory`]), per-process samples of
//! PIDs that are neither ours nor listed, and utilization beyond our own load. The
//! policy counts all of it as **one foreign process without a PID**, and keeps both
//! promises for it:
//! - `presence`: idle while its memory is there or it is seen working, plus the grace.
//!   Memory leads (a newcomer's context takes memory before NVML lists it even on the
//!   host), so the promise to be idle before a newcomer's first kernel holds.
//! - `activity`: it counts as working when its memory appears and whenever that memory
//!   grows by more than the margin (a newcomer beside a quiet holder, or a holder
//!   allocating before it works), and whenever its samples or the utilization show work;
//!   quiet for `idle_grace`, gpufill fills beside it, as it does beside a listed one.
//!
//! Ignore lists cannot name it: it has neither PID nor name (an ignored PID still never
//! counts when its per-process samples show it).

mod decision;
mod holders;
mod seen;
#[cfg(test)]
mod tests;
mod timers;

use std::time::Duration;

use crate::device::ProcessInfo;
use crate::time::Time;
use crate::unlisted::Unlisted;

pub use decision::{
    BURST_HOLD, BesideLive, CONFIRM_AFTER, Decision, LIVE_HOLD_MAX_FACTOR, YieldMode,
    YieldSettings, live_hold,
};
use holders::{Evidence, Holders};
use seen::Hidden;
pub use seen::Seen;
use timers::Timers;

/// Decides, every tick, whether to yield to foreign processes: the rule of its mode
/// ([`YieldPolicy::decide_seen`]), over the waits it keeps (the grace, the idle graces,
/// the burst hold) and, in activity mode, what it knows of quiet holders.
#[derive(Clone, Debug, Default)]
pub struct YieldPolicy {
    settings: YieldSettings,
    timers: Timers,
    holders: Holders,
    /// When anyone (ignored ones included) was last listed: work our kernels show up to
    /// [`BURST_HOLD`] later (a burst or two) may have been theirs.
    last_listed: Option<Time>,
}

impl YieldPolicy {
    /// A policy with the given settings.
    pub fn new(settings: YieldSettings) -> Self {
        YieldPolicy {
            settings,
            timers: Timers::default(),
            holders: Holders::default(),
            last_listed: None,
        }
    }

    /// Replaces the settings from the next decision on (a config reload), keeping what
    /// the policy has seen (the grace and per-process activity carry over).
    pub fn set_settings(&mut self, settings: YieldSettings) {
        self.settings = settings;
    }

    /// The settings in force.
    pub fn settings(&self) -> &YieldSettings {
        &self.settings
    }

    /// Whether any of `foreign` counts (is not on an ignore list).
    pub fn counts_any(&self, foreign: &[ProcessInfo]) -> bool {
        foreign.iter().any(|p| self.counts(p))
    }

    /// Whether [`YieldPolicy::decide`] uses per-process activity, which is costly to read.
    pub fn needs_activity(&self) -> bool {
        matches!(self.settings.mode, YieldMode::Activity { .. })
    }

    /// Whether per-process activity is worth reading this tick, given the foreign
    /// processes listed and what the probe sees beyond its list: in activity mode while
    /// anyone is there, listed or not; in presence mode only where memory cannot show
    /// unlisted processes (their samples are then the only sign of them).
    pub fn wants_activity(&self, listed: &[ProcessInfo], unlisted: Unlisted) -> bool {
        match self.settings.mode {
            YieldMode::Mps => false,
            YieldMode::Presence => unlisted == Unlisted::Unknown,
            // Beside quiet holders a probe has judged (filling beside them, or holding
            // off), our own kernels and probes see their work first and cheaper: the
            // samples (over a millisecond of CPU a read) are for newcomers' idle grace.
            YieldMode::Activity { .. } if self.holders.judged() => false,
            YieldMode::Activity { .. } => {
                !listed.is_empty() || matches!(unlisted, Unlisted::Memory(_) | Unlisted::Unknown)
            }
        }
    }

    /// Whether anyone else who counts is on the GPU by what `seen` shows: a listed
    /// process not ignored, or an unlisted one (for the quiet time of schedules).
    pub fn sees_anyone(&self, seen: &Seen<'_>) -> bool {
        self.counts_any(seen.listed) || self.hidden(seen).is_some_and(Hidden::there)
    }

    /// Decides from the foreign processes listed now and, in activity mode, the PIDs
    /// the device reported working since the last call (empty when nothing new), with
    /// a complete list (the host view).
    pub fn decide(&mut self, now: Time, foreign: &[ProcessInfo], active: &[u32]) -> Decision {
        self.decide_seen(now, &Seen::complete(foreign, active))
    }

    /// Decides from everything `seen` shows, unlisted processes included, by the rule
    /// of the mode in force.
    pub fn decide_seen(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        let decision = match self.settings.mode {
            YieldMode::Presence => self.decide_presence(now, seen),
            YieldMode::Activity { idle_grace } => self.decide_activity(now, seen, idle_grace),
            YieldMode::Mps => self.decide_mps(now, seen),
        };
        if !seen.listed.is_empty() {
            self.last_listed = Some(now);
        }
        decision
    }

    /// The answer to a [`Decision::Probe`]: whether another context ran on the GPU since
    /// our previous kernel (`None`: the load source cannot tell; NVML's word stands).
    /// Nobody: fill beside them. Somebody: hold, longer after each such probe in a row
    /// ([`live_hold`]).
    pub fn probed(&mut self, now: Time, someone_ran: Option<bool>) -> Decision {
        let idle_grace = match self.settings.mode {
            YieldMode::Activity { idle_grace } => idle_grace,
            _ => self.settings.grace,
        };
        self.holders.probed(now, idle_grace, someone_ran)
    }

    /// Presence mode: idle while anyone who counts is listed or the device shows
    /// someone unlisted, and for the grace after.
    fn decide_presence(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        let pids = self.counted(seen.listed);
        let unlisted = self.hidden(seen).is_some_and(Hidden::there);
        if !pids.is_empty() || unlisted {
            return self.yield_to(now, pids, unlisted);
        }
        self.nobody_there(now, seen)
    }

    /// Activity mode: idle while anyone present works or appeared less than
    /// `idle_grace` ago, and for the grace after the last such one left; beside the
    /// quiet holders who stay, what [`Holders`] decides.
    fn decide_activity(&mut self, now: Time, seen: &Seen<'_>, idle_grace: Duration) -> Decision {
        let listed = self.counted(seen.listed);
        let hidden = self.hidden(seen);
        // Work of a process already past its idle grace (a quiet holder we fill beside)
        // is a burst, not a reason to yield for the idle grace again. A late start of
        // ours alone is a weak sign of one.
        let mut burst = seen.beyond_own || seen.held_back.is_some_and(|s| !s.is_weak());
        let (unlisted_there, unlisted) = self
            .timers
            .unlisted_working(now, hidden, idle_grace, &mut burst);
        let working = self
            .timers
            .working(now, &listed, seen.active, idle_grace, &mut burst);
        let evidence = match (burst, seen.held_back) {
            (true, sign) => Evidence::Strong(sign.filter(|s| !s.is_weak())),
            (false, Some(sign)) => Evidence::Weak(sign),
            (false, None) => Evidence::None,
        };
        if self.settings.beside_live == BesideLive::FillGaps
            && !unlisted
            && !listed.is_empty()
            && self.timers.newcomers(now, &listed, idle_grace).is_empty()
        {
            // Everyone listed has been there for the idle grace: whether they work or
            // not, fill the gaps they leave (newcomers are yielded to below). Nobody
            // is yielded to, so no grace is owed when they leave.
            self.timers.end_grace();
            self.holders.forget();
            return Decision::FillGaps { pids: listed };
        }
        if !working.is_empty() || unlisted {
            return self.yield_to(now, working, unlisted);
        }
        if listed.is_empty() && !unlisted_there {
            return self.nobody_there(now, seen);
        }
        // Everyone quiet for the idle grace: fill beside them if they are dormant, and
        // owe no grace when they leave. A working process that left (rather than went
        // quiet) is owed the grace, as when nobody stays.
        if self.holders.stayed_after_yield(seen.listed, unlisted_there) {
            self.timers.end_grace();
        }
        if self.timers.in_grace(now, self.settings.grace) {
            return Decision::Yield {
                pids: Vec::new(),
                unlisted: false,
            };
        }
        self.timers.end_grace();
        self.holders
            .decide(now, idle_grace, evidence, (listed, unlisted_there))
    }

    /// MPS mode: only listed processes that are not MPS clients count, as in presence
    /// mode (with the grace after the last one).
    fn decide_mps(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        let pids: Vec<u32> = seen
            .listed
            .iter()
            .filter(|p| !p.mps_client && self.counts(p))
            .map(|p| p.pid)
            .collect();
        if !pids.is_empty() {
            self.timers.start_grace(now);
        }
        if !pids.is_empty() || self.timers.in_grace(now, self.settings.grace) {
            return Decision::Yield {
                pids,
                unlisted: false,
            };
        }
        Decision::Fill {
            unexplained: seen.held_back.filter(|_| seen.listed.is_empty()),
        }
    }

    /// Yields to `pids` (and someone unlisted): the grace runs from `now`.
    fn yield_to(&mut self, now: Time, pids: Vec<u32>, unlisted: bool) -> Decision {
        self.timers.start_grace(now);
        self.holders.yielded(pids.clone(), unlisted);
        Decision::Yield { pids, unlisted }
    }

    /// Nobody who counts is there: the grace if one is owed, else fill, unless a kernel
    /// of ours has just shown someone that nothing else could have shown (then idle for
    /// [`BURST_HOLD`], or until a quiet sample).
    ///
    /// Our kernels' timing counts here only where the device cannot show every context:
    /// inside a PID namespace of our own whose memory reading cannot tell
    /// ([`Unlisted::Unknown`]). In the host's view NVML lists every compute context
    /// before its first kernel, and inside a namespace every context shows in device
    /// memory ([`crate::unlisted`]): a sign with nobody there is the host's own jitter
    /// (docs/benchmarks.md#start-jitter-on-an-empty-gpu-labpy-jitter-scriptsjitter_sessionsh), and the decision carries it as
    /// `unexplained`. With anyone listed, ignored ones included, now or less than
    /// [`BURST_HOLD`] ago, our kernels' timing cannot tell whose work it showed, so it
    /// does not count either: an ignored process (a monitoring agent, another gpufill)
    /// never pauses us.
    fn nobody_there(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        self.holders.forget();
        if self.timers.in_grace(now, self.settings.grace) {
            return Decision::Yield {
                pids: Vec::new(),
                unlisted: false,
            };
        }
        if self.timers.burst_hold(
            now,
            seen.held_back.is_some()
                && seen.unlisted == Unlisted::Unknown
                && seen.listed.is_empty()
                && self
                    .last_listed
                    .is_none_or(|at| now.saturating_since(at) >= BURST_HOLD),
            seen.quiet_sample,
        ) {
            return Decision::Pause {
                pids: Vec::new(),
                unlisted: true,
                sign: seen.held_back,
            };
        }
        // Where the device would show anyone there, a sign with nobody listed is the
        // host's own; in a view that cannot tell, someone listed a moment ago may have
        // made it.
        Decision::Fill {
            unexplained: seen
                .held_back
                .filter(|_| seen.listed.is_empty() && seen.unlisted != Unlisted::Unknown),
        }
    }

    /// The PIDs of `listed` that count (are on no ignore list).
    fn counted(&self, listed: &[ProcessInfo]) -> Vec<u32> {
        listed
            .iter()
            .filter(|p| self.counts(p))
            .map(|p| p.pid)
            .collect()
    }

    fn counts(&self, p: &ProcessInfo) -> bool {
        let names = &self.settings.ignore_names;
        let ignored_name = !names.is_empty()
            && p.name.as_deref().is_some_and(|name| {
                let base = name.rsplit('/').next().unwrap_or(name);
                names.iter().any(|n| n == base)
            });
        !ignored_name && !self.settings.ignore_pids.contains(&p.pid)
    }

    /// The unlisted evidence in `seen`; `None` for a complete list. Samples of PIDs that
    /// are not listed are work of an unlisted process unless ignored.
    fn hidden(&self, seen: &Seen<'_>) -> Option<Hidden> {
        if !seen.unlisted.partial() {
            return None;
        }
        let unknown_active = seen.active.iter().any(|pid| {
            !seen.listed.iter().any(|p| p.pid == *pid) && !self.settings.ignore_pids.contains(pid)
        });
        // In activity mode utilization beyond ours is a burst of whoever is present
        // ([`Decision::Pause`]), for listed and unlisted holders alike.
        let by_utilization = seen.beyond_own && !self.needs_activity();
        Some(Hidden {
            memory: seen.unlisted.memory_bytes(),
            working: unknown_active || by_utilization,
        })
    }
}
