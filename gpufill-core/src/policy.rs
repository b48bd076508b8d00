//! Yield policies: when to stand aside for other processes.
//!
//! Without MPS the GPU time-slices between processes, so any kernel of ours that is
//! resident while another process wants to run slows it markedly (measured at 50 % duty:
//! docs/benchmarks.md, "The GPU itself, measured before gpufill (probes)"). The only way to cost nothing is to be idle whenever anyone else is
//! on the GPU. The loop asks the policy before the controller, and the policy wins.
//!
//! Two modes:
//! - [`YieldMode::Presence`] (default): idle while any other compute process is listed,
//!   even one that only holds a context, and for `grace` after the last one left.
//! - [`YieldMode::Activity`]: for notebooks that hold a context for hours. A process
//!   counts as working from the moment it is listed and whenever the device reports
//!   kernels of it; once it has been quiet for `idle_grace` gpufill fills beside it, and
//!   yields again at the first sample that shows it working (per-process samples come
//!   every 200 ms on an H200, so its first kernels can meet ours).
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

/// The longest a burst of a quiet holder keeps gpufill idle after its last sign (a
/// sample beyond our own load, its per-process samples, a kernel of ours held back),
/// when no quiet sample (one whose window held none of our load and shows nobody:
/// [`Seen::quiet_sample`]) ends the pause sooner. It bridges the gap between two of
/// NVML's utilization samples (200 ms on the H100 and H200; a product with slower
/// samples re-pauses at each one that still shows work): while the holder keeps working
/// every sample shows it and the pause goes on.
pub const BURST_HOLD: Duration = Duration::from_millis(500);

/// What the policy decided for this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody else is here: fill.
    Fill,
    /// Others hold a context but are quiet (activity mode, past the idle grace): fill
    /// beside them in [`crate::LaunchShape::OneInFlight`], so that their next kernel
    /// waits at most one short kernel of ours.
    FillBeside,
    /// A quiet holder (past its idle grace) is working: a sample beyond our own load,
    /// its per-process samples or a kernel of ours held back show a burst. Idle until
    /// a quiet sample, or [`BURST_HOLD`] after the last sign, then fill beside it
    /// again. No grace is owed afterwards.
    Pause {
        /// PIDs of the listed foreign processes present (any of them may be the one).
        pids: Vec<u32>,
        /// A foreign process that the list does not show is present.
        unlisted: bool,
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
    /// Whether the decision is to fill.
    pub fn is_fill(&self) -> bool {
        matches!(self, Decision::Fill | Decision::FillBeside)
    }

    /// How many foreign processes cause the decision (one for an unlisted presence).
    pub fn foreign_count(&self) -> usize {
        match self {
            Decision::Fill | Decision::FillBeside => 0,
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
    /// A kernel of ours was held back by another context since the last tick
    /// ([`crate::LoadSource::others_seen`]): someone is working right now.
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
    /// Activity mode: the last sample that showed work beyond ours beside quiet holders.
    last_burst: Option<Time>,
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
            return Decision::Yield { pids, unlisted };
        }
        if anyone_listed || unlisted_there {
            // Activity mode, everyone quiet for the idle grace: fill beside them, and owe
            // no grace when they leave; pause while the utilization shows a burst. A
            // working process that left (rather than went quiet) is owed the grace, as
            // when nobody stays.
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
            if burst {
                self.last_burst = Some(now);
            }
            if let Some(at) = self.last_burst {
                let since = now.saturating_since(at);
                if since >= BURST_HOLD || (seen.quiet_sample && !burst) {
                    self.last_burst = None;
                }
            }
            if self.last_burst.is_some() {
                return Decision::Pause {
                    pids: seen
                        .listed
                        .iter()
                        .filter(|p| self.counts(p))
                        .map(|p| p.pid)
                        .collect(),
                    unlisted: unlisted_there,
                };
            }
            return Decision::FillBeside;
        }
        self.last_burst = None;
        self.last_yield = None;
        match self.last_seen {
            Some(seen) if now.saturating_since(seen) < self.settings.grace => Decision::Yield {
                pids,
                unlisted: false,
            },
            _ => Decision::Fill,
        }
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

    #[test]
    fn activity_mode_yields_to_a_newcomer_then_fills_beside_it_once_quiet() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        assert!(!p.decide(Time::from_millis(0), &nb, &[]).is_fill());
        assert!(!p.decide(Time::from_millis(999), &nb, &[]).is_fill());
        assert!(p.decide(Time::from_millis(1000), &nb, &[]).is_fill());
    }

    #[test]
    fn activity_mode_pauses_the_moment_a_quiet_holder_works_and_fills_beside_it_after() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        p.decide(Time::from_millis(0), &nb, &[]);
        assert_eq!(
            p.decide(Time::from_millis(5000), &nb, &[]),
            Decision::FillBeside
        );
        // Its samples show work: a burst of a holder past its idle grace, so a pause
        // for BURST_HOLD, not a yield for the idle grace.
        assert_eq!(
            p.decide(Time::from_millis(5010), &nb, &[5]),
            Decision::Pause {
                pids: vec![5],
                unlisted: false
            }
        );
        assert!(!p.decide(Time::from_millis(5500), &nb, &[]).is_fill());
        assert_eq!(
            p.decide(Time::from_millis(5510), &nb, &[]),
            Decision::FillBeside
        );
        // Working on: every sample renews the pause.
        assert!(!p.decide(Time::from_millis(6000), &nb, &[5]).is_fill());
        assert!(!p.decide(Time::from_millis(6400), &nb, &[5]).is_fill());
        assert!(p.decide(Time::from_millis(6900), &nb, &[]).is_fill());
    }

    #[test]
    fn activity_mode_pauses_beside_a_quiet_holder_while_the_utilization_shows_more_than_ours() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        let burst = Seen {
            beyond_own: true,
            ..quiet
        };
        p.decide_seen(ms(0), &quiet);
        assert_eq!(p.decide_seen(ms(2000), &quiet), Decision::FillBeside);
        assert_eq!(
            p.decide_seen(ms(2050), &burst),
            Decision::Pause {
                pids: vec![5],
                unlisted: false
            }
        );
        assert!(!p.decide_seen(ms(2250), &burst).is_fill(), "still working");
        assert!(
            !p.decide_seen(ms(2700), &quiet).is_fill(),
            "within BURST_HOLD"
        );
        assert_eq!(p.decide_seen(ms(2750), &quiet), Decision::FillBeside);
        // Nobody else there: utilization beyond ours is nobody's burst (no pause).
        assert_eq!(
            p.decide_seen(
                ms(3000),
                &Seen {
                    beyond_own: true,
                    ..Seen::complete(&[], &[])
                }
            ),
            Decision::Fill
        );
    }

    #[test]
    fn a_pause_ends_at_the_first_quiet_sample_or_at_burst_hold() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        let quiet = Seen::complete(&nb, &[]);
        let sample = |beyond_own: bool| Seen {
            quiet_sample: !beyond_own,
            beyond_own,
            ..quiet
        };
        let held_back = Seen {
            held_back: true,
            ..quiet
        };
        p.decide_seen(ms(0), &quiet);
        assert_eq!(p.decide_seen(ms(2000), &quiet), Decision::FillBeside);
        // A kernel of ours held back: pause at once, before any sample.
        assert!(matches!(
            p.decide_seen(ms(2010), &held_back),
            Decision::Pause { .. }
        ));
        // A sample still showing work renews it; a quiet one (its window free of our
        // load) ends it.
        assert!(!p.decide_seen(ms(2300), &sample(true)).is_fill());
        assert!(!p.decide_seen(ms(2400), &quiet).is_fill());
        assert_eq!(
            p.decide_seen(ms(2500), &sample(false)),
            Decision::FillBeside
        );
        // Without samples, BURST_HOLD ends it.
        p.decide_seen(ms(3000), &held_back);
        assert!(!p.decide_seen(ms(3499), &quiet).is_fill());
        assert_eq!(p.decide_seen(ms(3500), &quiet), Decision::FillBeside);
        // Nobody else there: a held-back kernel is nobody's burst.
        assert_eq!(
            p.decide_seen(
                ms(4000),
                &Seen {
                    held_back: true,
                    ..Seen::complete(&[], &[])
                }
            ),
            Decision::Fill
        );
    }

    #[test]
    fn activity_mode_yields_to_a_newcomer_beside_a_quiet_holder_for_the_idle_grace() {
        let mut p = activity(1000);
        p.decide(ms(0), &procs(&[5]), &[]);
        assert_eq!(p.decide(ms(2000), &procs(&[5]), &[]), Decision::FillBeside);
        assert_eq!(
            p.decide(ms(2010), &procs(&[5, 6]), &[]),
            Decision::Yield {
                pids: vec![6],
                unlisted: false
            }
        );
        assert!(!p.decide(ms(3000), &procs(&[5, 6]), &[]).is_fill());
        assert_eq!(
            p.decide(ms(3010), &procs(&[5, 6]), &[]),
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
                p.decide_seen(ms(t), &burst),
                Decision::Yield { .. }
            ));
        }
    }

    #[test]
    fn activity_mode_fills_at_once_when_a_quiet_process_leaves() {
        let mut p = activity(1000);
        p.decide(Time::from_millis(0), &procs(&[5]), &[]);
        assert!(
            p.decide(Time::from_millis(2000), &procs(&[5]), &[])
                .is_fill()
        );
        assert!(p.decide(Time::from_millis(2010), &[], &[]).is_fill());
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
        assert!(p.decide_seen(ms(0), &hidden(0)).is_fill());
        let d = p.decide_seen(ms(100), &hidden(19));
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
        assert!(!p.decide_seen(ms(60_000), &hidden(620)).is_fill());
        // Gone: the grace, then fill.
        let grace = p.decide_seen(ms(60_100), &hidden(0));
        assert_eq!(
            grace,
            Decision::Yield {
                pids: vec![],
                unlisted: false
            }
        );
        assert!(!p.sees_anyone(&hidden(0)));
        assert!(p.decide_seen(ms(65_000), &hidden(0)).is_fill());
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
        assert!(p.decide_seen(ms(0), &seen).is_fill());
    }

    #[test]
    fn activity_mode_treats_an_unlisted_holder_like_a_listed_one() {
        let mut p = activity(1000);
        // Appears (memory): yield for the idle grace, then fill beside it.
        assert!(!p.decide_seen(ms(0), &hidden(19)).is_fill());
        assert!(!p.decide_seen(ms(200), &hidden(620)).is_fill());
        assert!(!p.decide_seen(ms(1199), &hidden(620)).is_fill());
        assert!(p.decide_seen(ms(1200), &hidden(620)).is_fill());
        assert!(p.decide_seen(ms(5000), &hidden(625)).is_fill());
        // Its first per-process sample (a host PID we cannot see): a burst of a quiet
        // holder, so a pause for BURST_HOLD.
        let active = [444];
        let working = Seen {
            active: &active,
            ..hidden(620)
        };
        assert_eq!(
            p.decide_seen(ms(5010), &working),
            Decision::Pause {
                pids: vec![],
                unlisted: true
            }
        );
        assert!(!p.decide_seen(ms(5500), &hidden(620)).is_fill());
        assert_eq!(p.decide_seen(ms(5510), &hidden(620)), Decision::FillBeside);
        // Quiet when it leaves: fill at once, no grace owed.
        assert!(p.decide_seen(ms(6020), &hidden(0)).is_fill());
    }

    #[test]
    fn activity_mode_owes_only_the_grace_once_an_unlisted_newcomers_memory_is_gone() {
        let mut p = activity(30_000);
        assert!(!p.decide_seen(ms(0), &hidden(620)).is_fill());
        assert!(!p.decide_seen(ms(7000), &hidden(620)).is_fill());
        // It left before its idle grace ran out: the grace (5 s) after the last yield,
        // not the rest of the idle grace.
        assert_eq!(
            p.decide_seen(ms(7050), &hidden(0)),
            Decision::Yield {
                pids: vec![],
                unlisted: false
            }
        );
        assert_eq!(p.decide_seen(ms(12_050), &hidden(0)), Decision::Fill);
    }

    #[test]
    fn activity_mode_yields_when_unlisted_memory_grows_beside_a_quiet_holder() {
        let mut p = activity(1000);
        p.decide_seen(ms(0), &hidden(620));
        assert!(p.decide_seen(ms(2000), &hidden(620)).is_fill());
        // A newcomer's context (or the holder allocating before its work).
        assert!(
            p.decide_seen(ms(2010), &hidden(630)).is_fill(),
            "within the margin"
        );
        assert!(!p.decide_seen(ms(2020), &hidden(640)).is_fill());
        // Less memory, then a rise from there, also counts.
        assert!(p.decide_seen(ms(3100), &hidden(300)).is_fill());
        assert!(!p.decide_seen(ms(3110), &hidden(330)).is_fill());
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
        assert!(p.decide_seen(ms(0), &quiet).is_fill());
        assert!(!p.decide_seen(ms(100), &unknown).is_fill());
        assert!(!p.decide_seen(ms(1099), &quiet).is_fill());
        assert!(p.decide_seen(ms(1100), &quiet).is_fill());
        assert!(p.decide_seen(ms(1110), &quiet).is_fill());
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
