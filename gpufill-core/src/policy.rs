//! Yield policies: when to stand aside for other processes.
//!
//! Without MPS the GPU time-slices between processes, so any kernel of ours that is
//! resident while another process wants to run slows it markedly (measured at 50 % duty:
//! docs/benchmarks.md, "The GPU itself, measured before gpufill (probes)"). The only way to cost nothing is to be idle whenever anyone else is
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

use std::collections::HashMap;
use std::time::Duration;

use crate::device::ProcessInfo;
use crate::time::Time;
use crate::unlisted::{UNLISTED_MARGIN, Unlisted};

/// How long gpufill stays idle after a kernel of ours showed that someone nobody lists
/// ran on an otherwise empty GPU ([`Seen::held_back`] with nobody listed: a graphics
/// client, a process in another container, a newcomer about to be listed), unless a
/// quiet sample ([`Seen::quiet_sample`]) ends it sooner.
pub const BURST_HOLD: Duration = Duration::from_millis(500);

/// The longest [`live_hold`] grows to, in multiples of the idle grace.
pub const LIVE_HOLD_MAX_FACTOR: u32 = 8;

/// How long gpufill holds off a holder that showed life before probing it again: the
/// idle grace after the first sign, and twice as long after each probe in a row that
/// found it still working (`lates` probes), up to [`LIVE_HOLD_MAX_FACTOR`] idle graces.
/// A live service is probed ever more rarely (each probe can cost its next request one
/// context switch), a notebook that ran a cell is filled beside one idle grace after
/// its cell ended.
pub fn live_hold(idle_grace: Duration, lates: u32) -> Duration {
    let factor = 1u32 << lates.saturating_sub(1).min(LIVE_HOLD_MAX_FACTOR.ilog2());
    idle_grace.saturating_mul(factor)
}

/// What the policy decided for this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody else is here: fill.
    Fill,
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
    },
    /// Activity mode: everyone present has been quiet for the idle grace (or a hold
    /// has ended): ask the load source whether anyone ran on the GPU since our
    /// previous kernel ([`crate::LoadSource::probe`]) and hand the answer to
    /// [`YieldPolicy::probed`], which decides.
    Probe,
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
    /// Whether the decision is to fill.
    pub fn is_fill(&self) -> bool {
        matches!(self, Decision::Fill | Decision::FillBeside)
    }

    /// How many foreign processes cause the decision (one for an unlisted presence).
    pub fn foreign_count(&self) -> usize {
        match self {
            Decision::Fill | Decision::FillBeside | Decision::Probe => 0,
            Decision::Yield { pids, unlisted } | Decision::Pause { pids, unlisted } => {
                pids.len() + usize::from(*unlisted)
            }
        }
    }
}

/// What the policy weighs in one tick.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// The foreign processes listed now (ours left out).
    pub listed: &'a [ProcessInfo],
    /// PIDs the device reported working since the last reading (per-process samples;
    /// empty when not read).
    pub active: &'a [u32],
    /// What the probe sees beyond its list ([`Unlisted::ListComplete`] in the host view).
    pub unlisted: Unlisted,
    /// Whether the newest utilization sample exceeds what our own load explains
    /// ([`crate::unlisted::OwnShare`]): work of an unlisted process where the list is
    /// partial (presence mode), and in activity mode a burst of whoever is present.
    pub beyond_own: bool,
    /// A new utilization sample arrived in this tick whose window held none of our load
    /// ([`crate::unlisted::OwnShare::window_idle`]) and that shows nothing beyond the
    /// margin: nobody worked over its window.
    pub quiet_sample: bool,
    /// A kernel of ours showed another context's work since the last tick
    /// ([`crate::LoadSource::others_seen`]): it started a context switch late or was
    /// preempted. Someone ran on the GPU, listed or not.
    pub held_back: bool,
}

impl<'a> Seen<'a> {
    /// A complete list (the host view) and the PIDs seen working.
    pub fn complete(listed: &'a [ProcessInfo], active: &'a [u32]) -> Self {
        Seen {
            listed,
            active,
            unlisted: Unlisted::ListComplete,
            beyond_own: false,
            quiet_sample: false,
            held_back: false,
        }
    }
}

/// What the device shows of unlisted processes in one tick.
#[derive(Clone, Copy, Debug)]
struct Hidden {
    memory: Option<u64>,
    working: bool,
}

impl Hidden {
    fn there(self) -> bool {
        self.memory.is_some() || self.working
    }
}

/// In activity mode, the unlisted presence as one process: when it last worked (or
/// appeared), and the least memory it has held since (a rise beyond the margin counts
/// as work).
#[derive(Clone, Copy, Debug)]
struct UnlistedTrack {
    last_work: Time,
    level: Option<u64>,
}

/// Activity mode: what is known of the quiet holders gpufill may fill beside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Beside {
    /// Nothing yet: probe before filling beside them.
    #[default]
    Unknown,
    /// A probe found nobody: filling beside them since `since`; `lates` carries the
    /// count of late probes before it (reset once a fill lasts the idle grace).
    Filling { since: Time, lates: u32 },
    /// A holder showed life: idle until `until`, then probe; `lates` probes in a row
    /// found it working.
    Holding { until: Time, lates: u32 },
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
    /// docs/benchmarks.md, "Under MPS"), so gpufill stays on beside them and its
    /// controller, which reads total device utilization, fills only the gap others leave.
    /// A listed process that is not a client of the MPS server time-slices with us as
    /// without MPS: gpufill yields to it as `Presence` does, with the grace.
    Mps,
}

/// Settings of [`YieldPolicy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YieldSettings {
    /// The mode.
    pub mode: YieldMode,
    /// How long to stay idle after the last (working) foreign process has gone.
    pub grace: Duration,
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
            ignore_pids: Vec::new(),
            ignore_names: Vec::new(),
        }
    }
}

/// Decides, every tick, whether to yield to foreign processes.
#[derive(Clone, Debug, Default)]
pub struct YieldPolicy {
    settings: YieldSettings,
    last_seen: Option<Time>,
    last_work: HashMap<u32, Time>,
    unlisted: Option<UnlistedTrack>,
    /// A sign of someone unlisted on an otherwise empty GPU (see [`BURST_HOLD`]).
    last_burst: Option<Time>,
    /// Activity mode: whether the quiet holders are dormant.
    beside: Beside,
    /// Activity mode: who was present when the last [`Decision::Probe`] was asked for.
    probing: Option<(Vec<u32>, bool)>,
    /// Activity mode: the working PIDs of the last yield, to tell at the end of a yield
    /// whether they left (the grace applies) or went quiet (fill beside them at once).
    last_yield: Option<(Vec<u32>, bool)>,
}

impl YieldPolicy {
    /// A policy with the given settings.
    pub fn new(settings: YieldSettings) -> Self {
        YieldPolicy {
            settings,
            last_seen: None,
            last_work: HashMap::new(),
            unlisted: None,
            last_burst: None,
            beside: Beside::Unknown,
            probing: None,
            last_yield: None,
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
            YieldMode::Activity { .. } if self.beside != Beside::Unknown => false,
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

    fn counts(&self, p: &ProcessInfo) -> bool {
        let names = &self.settings.ignore_names;
        let ignored_name = !names.is_empty()
            && p.name.as_deref().is_some_and(|name| {
                let base = name.rsplit('/').next().unwrap_or(name);
                names.iter().any(|n| n == base)
            });
        !ignored_name && !self.settings.ignore_pids.contains(&p.pid)
    }

    /// Decides from the foreign processes listed now and, in activity mode, the PIDs
    /// the device reported working since the last call (empty when nothing new), with
    /// a complete list (the host view).
    pub fn decide(&mut self, now: Time, foreign: &[ProcessInfo], active: &[u32]) -> Decision {
        self.decide_seen(now, &Seen::complete(foreign, active))
    }

    /// Decides from everything `seen` shows, unlisted processes included.
    pub fn decide_seen(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        let idle_grace = match self.settings.mode {
            YieldMode::Mps => return self.decide_mps(now, seen),
            YieldMode::Presence => None,
            YieldMode::Activity { idle_grace } => Some(idle_grace),
        };
        let listed: Vec<u32> = seen
            .listed
            .iter()
            .filter(|p| self.counts(p))
            .map(|p| p.pid)
            .collect();
        let anyone_listed = !listed.is_empty();
        let hidden = self.hidden(seen);
        // Activity mode: work of a process already past its idle grace (a quiet holder
        // we fill beside) is a burst, not a reason to yield for the idle grace again.
        let mut burst = seen.beyond_own || seen.held_back;
        let (unlisted_there, unlisted) = match idle_grace {
            None => {
                let there = hidden.is_some_and(Hidden::there);
                (there, there)
            }
            Some(idle_grace) => self.unlisted_working(now, hidden, idle_grace, &mut burst),
        };
        let pids = match idle_grace {
            None => listed,
            Some(idle_grace) => self.working(now, &listed, seen.active, idle_grace, &mut burst),
        };
        if !pids.is_empty() || unlisted {
            self.last_seen = Some(now);
            self.last_yield = Some((pids.clone(), unlisted));
            // Someone new or working: whatever was known of the holders is stale.
            self.beside = Beside::Unknown;
            return Decision::Yield { pids, unlisted };
        }
        if anyone_listed || unlisted_there {
            // Activity mode, everyone quiet for the idle grace: fill beside them if they
            // are dormant, and owe no grace when they leave. A working process that
            // left (rather than went quiet) is owed the grace, as when nobody stays.
            if let Some((pids, was_unlisted)) = self.last_yield.take() {
                let left = pids
                    .iter()
                    .any(|pid| !seen.listed.iter().any(|p| p.pid == *pid))
                    || (was_unlisted && !unlisted_there);
                if !left {
                    self.last_seen = None;
                }
            }
            if let Some(seen) = self.last_seen {
                if now.saturating_since(seen) < self.settings.grace {
                    return Decision::Yield {
                        pids: Vec::new(),
                        unlisted: false,
                    };
                }
                self.last_seen = None;
            }
            let present: Vec<u32> = seen
                .listed
                .iter()
                .filter(|p| self.counts(p))
                .map(|p| p.pid)
                .collect();
            let idle_grace = idle_grace.unwrap_or(self.settings.grace);
            return self.beside_holders(now, idle_grace, burst, (present, unlisted_there));
        }
        self.beside = Beside::Unknown;
        self.last_yield = None;
        match self.last_seen {
            Some(seen) if now.saturating_since(seen) < self.settings.grace => Decision::Yield {
                pids,
                unlisted: false,
            },
            _ => self.nobody_listed(now, seen),
        }
    }

    /// Nobody counts and no grace is owed: fill, unless a kernel of ours has just shown
    /// someone the list does not (then idle for [`BURST_HOLD`], or until a quiet sample).
    fn nobody_listed(&mut self, now: Time, seen: &Seen<'_>) -> Decision {
        if seen.held_back {
            self.last_burst = Some(now);
        } else if let Some(at) = self.last_burst
            && (now.saturating_since(at) >= BURST_HOLD || seen.quiet_sample)
        {
            self.last_burst = None;
        }
        if self.last_burst.is_some() {
            return Decision::Pause {
                pids: Vec::new(),
                unlisted: true,
            };
        }
        Decision::Fill
    }

    /// Activity mode, everyone present quiet for the idle grace: fill beside them while
    /// a probe has found them dormant, hold off for [`live_hold`] after any sign of life
    /// (`evidence`), probe when a hold ends or nothing is known yet.
    fn beside_holders(
        &mut self,
        now: Time,
        idle_grace: Duration,
        evidence: bool,
        present: (Vec<u32>, bool),
    ) -> Decision {
        self.beside = match self.beside {
            Beside::Filling { since, lates } if evidence => {
                // Dormant for a whole idle grace: the backoff starts afresh.
                let lates = if now.saturating_since(since) >= idle_grace {
                    0
                } else {
                    lates
                };
                Beside::Holding {
                    until: now + live_hold(idle_grace, lates),
                    lates,
                }
            }
            Beside::Holding { until, lates } if evidence => Beside::Holding {
                until: until.max(now + live_hold(idle_grace, lates)),
                lates,
            },
            other => other,
        };
        match self.beside {
            Beside::Filling { .. } => Decision::FillBeside,
            Beside::Holding { until, .. } if now < until => Decision::Pause {
                pids: present.0,
                unlisted: present.1,
            },
            Beside::Unknown | Beside::Holding { .. } => {
                self.probing = Some(present);
                Decision::Probe
            }
        }
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
        let lates = match self.beside {
            Beside::Holding { lates, .. } | Beside::Filling { lates, .. } => lates,
            Beside::Unknown => 0,
        };
        let (pids, unlisted) = self.probing.take().unwrap_or_default();
        if someone_ran == Some(true) {
            let lates = lates.saturating_add(1);
            self.beside = Beside::Holding {
                until: now + live_hold(idle_grace, lates),
                lates,
            };
            return Decision::Pause { pids, unlisted };
        }
        self.beside = Beside::Filling { since: now, lates };
        Decision::FillBeside
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
            self.last_seen = Some(now);
            return Decision::Yield {
                pids,
                unlisted: false,
            };
        }
        match self.last_seen {
            Some(seen) if now.saturating_since(seen) < self.settings.grace => Decision::Yield {
                pids,
                unlisted: false,
            },
            _ => Decision::Fill,
        }
    }

    /// Activity mode's view of the unlisted presence: whether it is there, and whether
    /// it worked (or appeared, or its memory grew by more than the margin) less than
    /// `idle_grace` ago. Seen only by samples (memory unknown), it is there until it
    /// has been quiet for the idle grace, then forgotten.
    fn unlisted_working(
        &mut self,
        now: Time,
        hidden: Option<Hidden>,
        idle_grace: Duration,
        burst: &mut bool,
    ) -> (bool, bool) {
        let Some(hidden) = hidden else {
            self.unlisted = None;
            return (false, false);
        };
        let track = match &mut self.unlisted {
            Some(track) => track,
            // Appearing counts as working: its first kernels are near.
            None if hidden.there() => self.unlisted.insert(UnlistedTrack {
                last_work: now,
                level: hidden.memory,
            }),
            None => return (false, false),
        };
        if hidden.working {
            if now.saturating_since(track.last_work) < idle_grace {
                track.last_work = now;
            } else {
                *burst = true;
            }
        }
        match (hidden.memory, track.level) {
            // More memory: another context, or allocations before work.
            (Some(bytes), Some(level)) if bytes > level.saturating_add(UNLISTED_MARGIN) => {
                track.last_work = now;
                track.level = Some(bytes);
            }
            (Some(bytes), Some(level)) => track.level = Some(level.min(bytes)),
            (Some(bytes), None) => {
                track.last_work = now;
                track.level = Some(bytes);
            }
            // Its memory is gone: it left (the grace after yielding applies, as for a
            // listed process that leaves), unless its samples still show it.
            (None, Some(_)) if !hidden.working => {
                self.unlisted = None;
                return (false, false);
            }
            (None, _) => track.level = None,
        }
        let recent = now.saturating_since(track.last_work) < idle_grace;
        if hidden.memory.is_none() && !recent {
            // Seen only by its work, and quiet for the idle grace: forget it, having
            // filled beside it (like a quiet listed process that leaves, it is owed no
            // grace).
            self.unlisted = None;
        }
        (true, recent)
    }

    /// The listed PIDs that worked (or appeared) less than `idle_grace` ago.
    fn working(
        &mut self,
        now: Time,
        listed: &[u32],
        active: &[u32],
        idle_grace: Duration,
        burst: &mut bool,
    ) -> Vec<u32> {
        self.last_work.retain(|pid, _| listed.contains(pid));
        for &pid in listed {
            // Appearing counts as working: a newcomer's first kernels are near.
            let last = self.last_work.entry(pid).or_insert(now);
            if active.contains(&pid) {
                if now.saturating_since(*last) < idle_grace {
                    *last = now;
                } else {
                    // A quiet holder working again: its samples lag (seconds for a
                    // light job), so this is a burst (a pause), not a new idle grace.
                    *burst = true;
                }
            }
        }
        listed
            .iter()
            .copied()
            .filter(|pid| now.saturating_since(self.last_work[pid]) < idle_grace)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs(pids: &[u32]) -> Vec<ProcessInfo> {
        pids.iter()
            .map(|&pid| ProcessInfo {
                pid,
                used_memory_bytes: None,
                name: Some(format!("/usr/bin/job{pid}")),
                mps_client: false,
            })
            .collect()
    }

    fn mps_policy() -> YieldPolicy {
        YieldPolicy::new(YieldSettings {
            mode: YieldMode::Mps,
            ..YieldSettings::default()
        })
    }

    #[test]
    fn under_mps_clients_run_beside_us_and_a_non_client_makes_us_yield_with_the_grace() {
        let mut policy = mps_policy();
        let t = |s: u64| Time::from_secs_f64(s as f64);
        let mut clients = procs(&[10, 11]);
        for p in &mut clients {
            p.mps_client = true;
        }
        assert_eq!(policy.decide(t(0), &clients, &[10, 11]), Decision::Fill);
        let mut mixed = clients.clone();
        mixed.extend(procs(&[12]));
        assert_eq!(
            policy.decide(t(1), &mixed, &[]),
            Decision::Yield {
                pids: vec![12],
                unlisted: false
            }
        );
        // It left: the grace (5 s) holds, then clients alone let us fill again.
        assert!(matches!(
            policy.decide(t(3), &clients, &[]),
            Decision::Yield { .. }
        ));
        assert_eq!(policy.decide(t(7), &clients, &[]), Decision::Fill);
    }

    #[test]
    fn yields_while_anyone_else_is_listed_and_fills_when_alone() {
        let mut p = YieldPolicy::default();
        assert!(p.decide(Time::ZERO, &[], &[]).is_fill());
        assert_eq!(
            p.decide(Time::from_millis(10), &procs(&[42]), &[]),
            Decision::Yield {
                pids: vec![42],
                unlisted: false
            }
        );
    }

    #[test]
    fn stays_idle_for_the_grace_after_the_last_one_leaves() {
        let mut p = YieldPolicy::new(YieldSettings {
            grace: Duration::from_secs(2),
            ..YieldSettings::default()
        });
        p.decide(Time::from_millis(1000), &procs(&[7]), &[]);
        assert!(!p.decide(Time::from_millis(2999), &[], &[]).is_fill());
        assert!(p.decide(Time::from_millis(3000), &[], &[]).is_fill());
    }

    #[test]
    fn ignored_pids_never_cause_a_yield() {
        let mut p = YieldPolicy::new(YieldSettings {
            ignore_pids: vec![99],
            ..YieldSettings::default()
        });
        assert!(p.decide(Time::ZERO, &procs(&[99]), &[]).is_fill());
        assert!(!p.decide(Time::ZERO, &procs(&[99, 5]), &[]).is_fill());
    }

    #[test]
    fn ignored_names_never_cause_a_yield() {
        let mut p = YieldPolicy::new(YieldSettings {
            ignore_names: vec!["job7".into()],
            ..YieldSettings::default()
        });
        assert!(p.decide(Time::ZERO, &procs(&[7]), &[]).is_fill());
        assert!(!p.decide(Time::ZERO, &procs(&[7, 8]), &[]).is_fill());
    }

    fn activity(idle_grace_ms: u64) -> YieldPolicy {
        YieldPolicy::new(YieldSettings {
            mode: YieldMode::Activity {
                idle_grace: Duration::from_millis(idle_grace_ms),
            },
            ..YieldSettings::default()
        })
    }

    /// The decision, with a probe (when asked for) answered: nobody ran.
    fn answered(p: &mut YieldPolicy, now: Time, seen: &Seen<'_>) -> Decision {
        match p.decide_seen(now, seen) {
            Decision::Probe => p.probed(now, Some(false)),
            d => d,
        }
    }

    /// [`answered`] for a complete list.
    fn listed(p: &mut YieldPolicy, now: Time, foreign: &[ProcessInfo], active: &[u32]) -> Decision {
        answered(p, now, &Seen::complete(foreign, active))
    }

    fn pause(pids: &[u32]) -> Decision {
        Decision::Pause {
            pids: pids.to_vec(),
            unlisted: false,
        }
    }

    #[test]
    fn activity_mode_probes_before_filling_beside_a_quiet_holder() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        assert!(matches!(
            p.decide_seen(ms(0), &quiet),
            Decision::Yield { .. }
        ));
        // Quiet for the idle grace: ask whether anyone ran since our last kernel.
        assert_eq!(p.decide_seen(ms(1000), &quiet), Decision::Probe);
        // Someone did (NVML saw nothing of it: a service of sub-millisecond requests):
        // hold for the idle grace, then probe again.
        assert_eq!(p.probed(ms(1000), Some(true)), pause(&[5]));
        assert_eq!(p.decide_seen(ms(1999), &quiet), pause(&[5]));
        assert_eq!(p.decide_seen(ms(2000), &quiet), Decision::Probe);
        // Nobody did: it is dormant, fill beside it.
        assert_eq!(p.probed(ms(2000), Some(false)), Decision::FillBeside);
        assert_eq!(p.decide_seen(ms(2050), &quiet), Decision::FillBeside);
        // A source that cannot tell leaves NVML's word standing.
        let mut q = activity(1000);
        q.decide_seen(ms(0), &quiet);
        assert_eq!(q.decide_seen(ms(1000), &quiet), Decision::Probe);
        assert_eq!(q.probed(ms(1000), None), Decision::FillBeside);
    }

    #[test]
    fn a_live_holder_is_probed_ever_more_rarely_and_never_filled_beside() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        p.decide_seen(ms(0), &quiet);
        let mut probes = Vec::new();
        for t in (1000..120_000).step_by(10) {
            match p.decide_seen(ms(t), &quiet) {
                Decision::Probe => {
                    probes.push(t);
                    assert_eq!(p.probed(ms(t), Some(true)), pause(&[5]));
                }
                d => assert_eq!(d, pause(&[5]), "at {t} ms"),
            }
        }
        // After the idle grace, holds of 1, 2, 4, 8, then 8 idle graces.
        assert_eq!(
            &probes[..7],
            &[1000, 2000, 4000, 8000, 16_000, 24_000, 32_000]
        );
        assert_eq!(
            live_hold(Duration::from_secs(30), 1),
            Duration::from_secs(30)
        );
        assert_eq!(
            live_hold(Duration::from_secs(30), 3),
            Duration::from_secs(120)
        );
        assert_eq!(
            live_hold(Duration::from_secs(30), 9),
            Duration::from_secs(240)
        );
    }

    #[test]
    fn the_first_sign_of_life_pauses_at_once_and_holds_for_the_idle_grace() {
        for sign in ["samples", "utilization", "held back"] {
            let mut p = activity(1000);
            let nb = procs(&[5]);
            let quiet = Seen::complete(&nb, &[]);
            let active = [5];
            let working = match sign {
                "samples" => Seen::complete(&nb, &active),
                "utilization" => Seen {
                    beyond_own: true,
                    ..quiet
                },
                _ => Seen {
                    held_back: true,
                    ..quiet
                },
            };
            p.decide_seen(ms(0), &quiet);
            assert_eq!(answered(&mut p, ms(1000), &quiet), Decision::FillBeside);
            assert_eq!(p.decide_seen(ms(5000), &working), pause(&[5]), "{sign}");
            // More work extends the hold; it ends with a probe.
            assert_eq!(p.decide_seen(ms(5500), &working), pause(&[5]), "{sign}");
            assert_eq!(p.decide_seen(ms(6499), &quiet), pause(&[5]), "{sign}");
            assert_eq!(p.decide_seen(ms(6500), &quiet), Decision::Probe, "{sign}");
            assert_eq!(p.probed(ms(6500), Some(false)), Decision::FillBeside);
        }
    }

    #[test]
    fn the_backoff_starts_afresh_once_a_holder_was_dormant_for_the_idle_grace() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        let woke = Seen {
            held_back: true,
            ..quiet
        };
        p.decide_seen(ms(0), &quiet);
        // Three late probes: the next hold is 4 idle graces.
        let mut t = 1000;
        for _ in 0..3 {
            while p.decide_seen(ms(t), &quiet) != Decision::Probe {
                t += 10;
            }
            p.probed(ms(t), Some(true));
        }
        while p.decide_seen(ms(t), &quiet) != Decision::Probe {
            t += 10;
        }
        assert_eq!(p.probed(ms(t), Some(false)), Decision::FillBeside);
        // It wakes soon after: the hold keeps the backoff (4 idle graces: it was live).
        assert_eq!(p.decide_seen(ms(t + 100), &woke), pause(&[5]));
        assert_eq!(p.decide_seen(ms(t + 100 + 3999), &quiet), pause(&[5]));
        assert_eq!(p.decide_seen(ms(t + 100 + 4000), &quiet), Decision::Probe);
        let t = t + 4100;
        assert_eq!(p.probed(ms(t), Some(false)), Decision::FillBeside);
        // Dormant for a whole idle grace, then it wakes: one idle grace again.
        assert_eq!(p.decide_seen(ms(t + 3000), &woke), pause(&[5]));
        assert_eq!(p.decide_seen(ms(t + 3999), &quiet), pause(&[5]));
        assert_eq!(p.decide_seen(ms(t + 4000), &quiet), Decision::Probe);
    }

    #[test]
    fn on_a_gpu_nobody_lists_a_kernel_that_shows_someone_pauses_only_briefly() {
        let mut p = activity(1000);
        let nobody = Seen::complete(&[], &[]);
        let shown = Seen {
            held_back: true,
            ..nobody
        };
        let quiet_sample = Seen {
            quiet_sample: true,
            ..nobody
        };
        assert_eq!(p.decide_seen(ms(0), &nobody), Decision::Fill);
        let unlisted = Decision::Pause {
            pids: vec![],
            unlisted: true,
        };
        assert_eq!(p.decide_seen(ms(100), &shown), unlisted);
        assert_eq!(p.decide_seen(ms(599), &nobody), unlisted);
        assert_eq!(p.decide_seen(ms(600), &nobody), Decision::Fill);
        // A quiet sample ends it sooner.
        assert_eq!(p.decide_seen(ms(1000), &shown), unlisted);
        assert_eq!(p.decide_seen(ms(1200), &quiet_sample), Decision::Fill);
        // Utilization beyond ours with nobody there is nobody's (no pause).
        let beyond = Seen {
            beyond_own: true,
            ..nobody
        };
        assert_eq!(p.decide_seen(ms(2000), &beyond), Decision::Fill);
    }

    #[test]
    fn per_process_samples_are_read_only_until_a_probe_has_judged_the_holders() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        p.decide_seen(ms(0), &quiet);
        assert!(
            p.wants_activity(&nb, Unlisted::ListComplete),
            "a newcomer's idle grace"
        );
        assert_eq!(answered(&mut p, ms(1000), &quiet), Decision::FillBeside);
        assert!(
            !p.wants_activity(&nb, Unlisted::ListComplete),
            "filling beside"
        );
        p.decide_seen(
            ms(1100),
            &Seen {
                held_back: true,
                ..quiet
            },
        );
        assert!(
            !p.wants_activity(&nb, Unlisted::ListComplete),
            "holding off"
        );
        // A newcomer: its idle grace needs the samples again.
        let two = procs(&[5, 6]);
        p.decide_seen(ms(1200), &Seen::complete(&two, &[]));
        assert!(p.wants_activity(&two, Unlisted::ListComplete));
    }

    #[test]
    fn activity_mode_treats_an_unlisted_holder_like_a_listed_one() {
        let mut p = activity(1000);
        // Appears (memory): yield for the idle grace, then probe and fill beside it.
        assert!(!p.decide_seen(ms(0), &hidden(19)).is_fill());
        assert!(!p.decide_seen(ms(200), &hidden(620)).is_fill());
        assert!(!p.decide_seen(ms(1199), &hidden(620)).is_fill());
        assert_eq!(p.decide_seen(ms(1200), &hidden(620)), Decision::Probe);
        assert_eq!(p.probed(ms(1200), Some(false)), Decision::FillBeside);
        assert!(p.decide_seen(ms(5000), &hidden(625)).is_fill());
        // Its first per-process sample (a host PID we cannot see): a sign of life of a
        // quiet holder, so a pause and a hold.
        let active = [444];
        let working = Seen {
            active: &active,
            ..hidden(620)
        };
        let unlisted = Decision::Pause {
            pids: vec![],
            unlisted: true,
        };
        assert_eq!(p.decide_seen(ms(5010), &working), unlisted);
        assert_eq!(p.decide_seen(ms(6009), &hidden(620)), unlisted);
        assert_eq!(p.decide_seen(ms(6010), &hidden(620)), Decision::Probe);
        assert_eq!(p.probed(ms(6010), Some(false)), Decision::FillBeside);
        // Quiet when it leaves: fill at once, no grace owed.
        assert!(p.decide_seen(ms(6020), &hidden(0)).is_fill());
    }

    #[test]
    fn activity_mode_yields_to_a_newcomer_then_fills_beside_it_once_quiet() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        assert!(!listed(&mut p, Time::from_millis(0), &nb, &[]).is_fill());
        assert!(!listed(&mut p, Time::from_millis(999), &nb, &[]).is_fill());
        assert!(listed(&mut p, Time::from_millis(1000), &nb, &[]).is_fill());
    }

    #[test]
    fn activity_mode_yields_to_a_newcomer_beside_a_quiet_holder_for_the_idle_grace() {
        let mut p = activity(1000);
        listed(&mut p, ms(0), &procs(&[5]), &[]);
        assert_eq!(
            listed(&mut p, ms(2000), &procs(&[5]), &[]),
            Decision::FillBeside
        );
        assert_eq!(
            listed(&mut p, ms(2010), &procs(&[5, 6]), &[]),
            Decision::Yield {
                pids: vec![6],
                unlisted: false
            }
        );
        assert!(!listed(&mut p, ms(3000), &procs(&[5, 6]), &[]).is_fill());
        assert_eq!(
            listed(&mut p, ms(3010), &procs(&[5, 6]), &[]),
            Decision::FillBeside
        );
    }

    #[test]
    fn presence_mode_never_fills_beside_anyone_and_ignores_bursts() {
        let mut p = YieldPolicy::default();
        let nb = procs(&[5]);
        let burst = Seen {
            beyond_own: true,
            ..Seen::complete(&nb, &[])
        };
        for t in [0, 1000, 60_000] {
            assert!(matches!(
                answered(&mut p, ms(t), &burst),
                Decision::Yield { .. }
            ));
        }
    }

    #[test]
    fn activity_mode_fills_at_once_when_a_quiet_process_leaves() {
        let mut p = activity(1000);
        listed(&mut p, Time::from_millis(0), &procs(&[5]), &[]);
        assert!(listed(&mut p, Time::from_millis(2000), &procs(&[5]), &[]).is_fill());
        assert!(listed(&mut p, Time::from_millis(2010), &[], &[]).is_fill());
        assert!(p.needs_activity());
        assert!(!YieldPolicy::default().needs_activity());
    }

    const MIB: u64 = 1 << 20;

    /// Inside a PID namespace: nothing listed, `memory` MiB unexplained (0: none).
    fn hidden(memory_mib: u64) -> Seen<'static> {
        Seen {
            listed: &[],
            active: &[],
            unlisted: if memory_mib == 0 {
                Unlisted::Explained
            } else {
                Unlisted::Memory(memory_mib * MIB)
            },
            beyond_own: false,
            quiet_sample: false,
            held_back: false,
        }
    }

    fn ms(ms: u64) -> Time {
        Time::from_millis(ms)
    }

    #[test]
    fn presence_yields_to_memory_no_listed_process_holds_then_keeps_the_grace() {
        let mut p = YieldPolicy::default();
        assert!(answered(&mut p, ms(0), &hidden(0)).is_fill());
        let d = answered(&mut p, ms(100), &hidden(19));
        assert_eq!(
            d,
            Decision::Yield {
                pids: vec![],
                unlisted: true
            }
        );
        assert_eq!(d.foreign_count(), 1);
        assert!(p.sees_anyone(&hidden(19)));
        // An idle holder: as long as its memory is there.
        assert!(!answered(&mut p, ms(60_000), &hidden(620)).is_fill());
        // Gone: the grace, then fill.
        let grace = answered(&mut p, ms(60_100), &hidden(0));
        assert_eq!(
            grace,
            Decision::Yield {
                pids: vec![],
                unlisted: false
            }
        );
        assert!(!p.sees_anyone(&hidden(0)));
        assert!(answered(&mut p, ms(65_000), &hidden(0)).is_fill());
    }

    #[test]
    fn samples_of_unknown_pids_and_utilization_beyond_ours_count_only_where_the_list_is_partial() {
        let active = [444];
        let partial = Seen {
            active: &active,
            ..hidden(0)
        };
        let complete = Seen::complete(&[], &active);
        assert!(
            !YieldPolicy::default()
                .decide_seen(ms(0), &partial)
                .is_fill()
        );
        // The host view keeps its old behaviour: a sample of a process that already
        // left the list does not make it yield.
        assert!(
            YieldPolicy::default()
                .decide_seen(ms(0), &complete)
                .is_fill()
        );
        let busy = Seen {
            beyond_own: true,
            ..hidden(0)
        };
        assert!(!YieldPolicy::default().decide_seen(ms(0), &busy).is_fill());
        let busy_host = Seen {
            beyond_own: true,
            ..Seen::complete(&[], &[])
        };
        assert!(
            YieldPolicy::default()
                .decide_seen(ms(0), &busy_host)
                .is_fill()
        );
    }

    #[test]
    fn samples_of_listed_or_ignored_pids_are_not_an_unlisted_process() {
        let mut p = YieldPolicy::new(YieldSettings {
            ignore_pids: vec![444, 7],
            ..YieldSettings::default()
        });
        let listed = procs(&[7]);
        let active = [444, 7];
        let seen = Seen {
            listed: &listed,
            active: &active,
            ..hidden(0)
        };
        assert!(answered(&mut p, ms(0), &seen).is_fill());
    }

    #[test]
    fn activity_mode_owes_only_the_grace_once_an_unlisted_newcomers_memory_is_gone() {
        let mut p = activity(30_000);
        assert!(!answered(&mut p, ms(0), &hidden(620)).is_fill());
        assert!(!answered(&mut p, ms(7000), &hidden(620)).is_fill());
        // It left before its idle grace ran out: the grace (5 s) after the last yield,
        // not the rest of the idle grace.
        assert_eq!(
            answered(&mut p, ms(7050), &hidden(0)),
            Decision::Yield {
                pids: vec![],
                unlisted: false
            }
        );
        assert_eq!(answered(&mut p, ms(12_050), &hidden(0)), Decision::Fill);
    }

    #[test]
    fn activity_mode_yields_when_unlisted_memory_grows_beside_a_quiet_holder() {
        let mut p = activity(1000);
        answered(&mut p, ms(0), &hidden(620));
        assert!(answered(&mut p, ms(2000), &hidden(620)).is_fill());
        // A newcomer's context (or the holder allocating before its work).
        assert!(
            answered(&mut p, ms(2010), &hidden(630)).is_fill(),
            "within the margin"
        );
        assert!(!answered(&mut p, ms(2020), &hidden(640)).is_fill());
        // Less memory, then a rise from there, also counts.
        assert!(answered(&mut p, ms(3100), &hidden(300)).is_fill());
        assert!(!answered(&mut p, ms(3110), &hidden(330)).is_fill());
    }

    #[test]
    fn activity_mode_seeing_only_samples_yields_for_the_idle_grace_after_each() {
        let mut p = activity(1000);
        let active = [444];
        let unknown = Seen {
            listed: &[],
            active: &active,
            unlisted: Unlisted::Unknown,
            beyond_own: false,
            quiet_sample: false,
            held_back: false,
        };
        let quiet = Seen {
            active: &[],
            ..unknown
        };
        assert!(answered(&mut p, ms(0), &quiet).is_fill());
        assert!(!answered(&mut p, ms(100), &unknown).is_fill());
        assert!(!answered(&mut p, ms(1099), &quiet).is_fill());
        assert!(answered(&mut p, ms(1100), &quiet).is_fill());
        assert!(answered(&mut p, ms(1110), &quiet).is_fill());
    }

    #[test]
    fn activity_is_read_when_someone_may_be_there_to_show_it() {
        let none: &[ProcessInfo] = &[];
        let presence = YieldPolicy::default();
        assert!(!presence.wants_activity(none, Unlisted::ListComplete));
        assert!(!presence.wants_activity(none, Unlisted::Memory(MIB)));
        assert!(presence.wants_activity(none, Unlisted::Unknown));
        let a = activity(1000);
        assert!(!a.wants_activity(none, Unlisted::ListComplete));
        assert!(!a.wants_activity(none, Unlisted::Explained));
        assert!(a.wants_activity(none, Unlisted::Memory(MIB)));
        assert!(a.wants_activity(none, Unlisted::Unknown));
        assert!(a.wants_activity(&procs(&[5]), Unlisted::ListComplete));
        let mps = YieldPolicy::new(YieldSettings {
            mode: YieldMode::Mps,
            ..YieldSettings::default()
        });
        assert!(!mps.wants_activity(&procs(&[5]), Unlisted::Unknown));
        assert!(mps.clone().decide_seen(ms(0), &hidden(620)).is_fill());
    }

    #[test]
    fn mps_mode_never_yields_to_mps_clients() {
        let mut p = YieldPolicy::new(YieldSettings {
            mode: YieldMode::Mps,
            ..YieldSettings::default()
        });
        let mut clients = procs(&[5, 6]);
        for c in &mut clients {
            c.mps_client = true;
        }
        assert!(p.decide(Time::ZERO, &clients, &[5]).is_fill());
    }
}
