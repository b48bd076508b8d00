//! Yield policies: when to stand aside for other processes.
//!
//! Without MPS the GPU time-slices between processes, so any kernel of ours that is
//! resident while another process wants to run slows it (20-48 % at 50 % duty,
//! gpu-facts.md). The only way to cost nothing is to be idle whenever anyone else is
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

use std::collections::HashMap;
use std::time::Duration;

use crate::device::ProcessInfo;
use crate::time::Time;

/// What the policy decided for this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody else is here: fill.
    Fill,
    /// Someone else is here (their PIDs), or left less than the grace ago (empty list).
    Yield {
        /// PIDs of the foreign processes that cause it; empty during the grace.
        pids: Vec<u32>,
    },
}

impl Decision {
    /// Whether the decision is to fill.
    pub fn is_fill(&self) -> bool {
        matches!(self, Decision::Fill)
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
    /// Never: under MPS, kernels of different processes run together (a one-warp filler
    /// cost a PyTorch job 1.5 %, gpu-facts.md), so gpufill stays on and its controller,
    /// which reads total device utilization, fills only the gap others leave.
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
}

impl YieldPolicy {
    /// A policy with the given settings.
    pub fn new(settings: YieldSettings) -> Self {
        YieldPolicy {
            settings,
            last_seen: None,
            last_work: HashMap::new(),
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

    fn counts(&self, p: &ProcessInfo) -> bool {
        let ignored_name = p.name.as_deref().is_some_and(|name| {
            let base = name.rsplit('/').next().unwrap_or(name);
            self.settings.ignore_names.iter().any(|n| n == base)
        });
        !ignored_name && !self.settings.ignore_pids.contains(&p.pid)
    }

    /// Decides from the foreign processes listed now and, in activity mode, the PIDs
    /// the device reported working since the last call (empty when nothing new).
    pub fn decide(&mut self, now: Time, foreign: &[ProcessInfo], active: &[u32]) -> Decision {
        let idle_grace = match self.settings.mode {
            YieldMode::Mps => return Decision::Fill,
            YieldMode::Presence => None,
            YieldMode::Activity { idle_grace } => Some(idle_grace),
        };
        let listed: Vec<u32> = foreign
            .iter()
            .filter(|p| self.counts(p))
            .map(|p| p.pid)
            .collect();
        let anyone_listed = !listed.is_empty();
        let pids = match idle_grace {
            None => listed,
            Some(idle_grace) => self.working(now, &listed, active, idle_grace),
        };
        if !pids.is_empty() {
            self.last_seen = Some(now);
            return Decision::Yield { pids };
        }
        if anyone_listed {
            // Activity mode, everyone quiet for the idle grace: fill, and owe no grace
            // when they leave.
            self.last_seen = None;
            return Decision::Fill;
        }
        match self.last_seen {
            Some(seen) if now.saturating_since(seen) < self.settings.grace => {
                Decision::Yield { pids }
            }
            _ => Decision::Fill,
        }
    }

    /// The listed PIDs that worked (or appeared) less than `idle_grace` ago.
    fn working(
        &mut self,
        now: Time,
        listed: &[u32],
        active: &[u32],
        idle_grace: Duration,
    ) -> Vec<u32> {
        self.last_work.retain(|pid, _| listed.contains(pid));
        for &pid in listed {
            // Appearing counts as working: a newcomer's first kernels are near.
            let last = self.last_work.entry(pid).or_insert(now);
            if active.contains(&pid) {
                *last = now;
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
            })
            .collect()
    }

    #[test]
    fn yields_while_anyone_else_is_listed_and_fills_when_alone() {
        let mut p = YieldPolicy::default();
        assert!(p.decide(Time::ZERO, &[], &[]).is_fill());
        assert_eq!(
            p.decide(Time::from_millis(10), &procs(&[42]), &[]),
            Decision::Yield { pids: vec![42] }
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
    fn activity_mode_yields_again_the_moment_it_works() {
        let mut p = activity(1000);
        let nb = procs(&[5]);
        p.decide(Time::from_millis(0), &nb, &[]);
        assert!(p.decide(Time::from_millis(5000), &nb, &[]).is_fill());
        assert_eq!(
            p.decide(Time::from_millis(5010), &nb, &[5]),
            Decision::Yield { pids: vec![5] }
        );
        assert!(!p.decide(Time::from_millis(5900), &nb, &[]).is_fill());
        assert!(p.decide(Time::from_millis(6010), &nb, &[]).is_fill());
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

    #[test]
    fn mps_mode_never_yields() {
        let mut p = YieldPolicy::new(YieldSettings {
            mode: YieldMode::Mps,
            ..YieldSettings::default()
        });
        assert!(p.decide(Time::ZERO, &procs(&[5, 6]), &[5]).is_fill());
    }
}
