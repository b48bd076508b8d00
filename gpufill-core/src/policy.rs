//! Yield policies: when to stand aside for other processes.
//!
//! Without MPS the GPU time-slices between processes, so any kernel of ours that is
//! resident while another process wants to run slows it (20-48 % at 50 % duty,
//! gpu-facts.md). The only way to cost nothing is to be idle whenever anyone else is
//! on the GPU. The loop asks the policy before the controller, and the policy wins.

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

/// Settings of [`YieldPolicy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YieldSettings {
    /// How long to stay idle after the last foreign process has gone.
    pub grace: Duration,
    /// PIDs that never count as foreign (monitoring agents, another gpufill).
    pub ignore_pids: Vec<u32>,
}

impl Default for YieldSettings {
    fn default() -> Self {
        YieldSettings {
            grace: Duration::from_secs(5),
            ignore_pids: Vec::new(),
        }
    }
}

/// The `presence` policy: idle while any other compute process is listed on the
/// device, and for `grace` after the last one has gone.
#[derive(Clone, Debug, Default)]
pub struct YieldPolicy {
    settings: YieldSettings,
    last_seen: Option<Time>,
}

impl YieldPolicy {
    /// A policy with the given settings.
    pub fn new(settings: YieldSettings) -> Self {
        YieldPolicy {
            settings,
            last_seen: None,
        }
    }

    /// Decides from the foreign processes listed now.
    pub fn decide(&mut self, now: Time, foreign: &[ProcessInfo]) -> Decision {
        let pids: Vec<u32> = foreign
            .iter()
            .map(|p| p.pid)
            .filter(|pid| !self.settings.ignore_pids.contains(pid))
            .collect();
        if !pids.is_empty() {
            self.last_seen = Some(now);
            return Decision::Yield { pids };
        }
        match self.last_seen {
            Some(seen) if now.saturating_since(seen) < self.settings.grace => {
                Decision::Yield { pids }
            }
            _ => Decision::Fill,
        }
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
            })
            .collect()
    }

    #[test]
    fn yields_while_anyone_else_is_listed_and_fills_when_alone() {
        let mut p = YieldPolicy::default();
        assert!(p.decide(Time::ZERO, &[]).is_fill());
        assert_eq!(
            p.decide(Time::from_millis(10), &procs(&[42])),
            Decision::Yield { pids: vec![42] }
        );
    }

    #[test]
    fn stays_idle_for_the_grace_after_the_last_one_leaves() {
        let mut p = YieldPolicy::new(YieldSettings {
            grace: Duration::from_secs(2),
            ..YieldSettings::default()
        });
        p.decide(Time::from_millis(1000), &procs(&[7]));
        assert!(!p.decide(Time::from_millis(2999), &[]).is_fill());
        assert!(p.decide(Time::from_millis(3000), &[]).is_fill());
    }

    #[test]
    fn ignored_pids_never_cause_a_yield() {
        let mut p = YieldPolicy::new(YieldSettings {
            ignore_pids: vec![99],
            ..YieldSettings::default()
        });
        assert!(p.decide(Time::ZERO, &procs(&[99])).is_fill());
        assert!(!p.decide(Time::ZERO, &procs(&[99, 5])).is_fill());
    }
}
