//! [`Timers`]: the waits the yield rule keeps, each as the time it runs from.

use std::collections::HashMap;
use std::time::Duration;

use super::decision::BURST_HOLD;
use super::seen::Hidden;
use crate::time::Time;
use crate::unlisted::UNLISTED_MARGIN;

/// When each of the rule's waits began.
#[derive(Clone, Debug, Default)]
pub(super) struct Timers {
    /// The grace: when someone who counts was last yielded to; `None` when no grace is
    /// owed (a quiet holder that stayed is owed none).
    grace_from: Option<Time>,
    /// Activity mode's idle grace, per listed PID: when each last worked (or appeared).
    idle_from: HashMap<u32, Time>,
    /// Per listed PID, when it was first listed (filling gaps spares only newcomers).
    listed_from: HashMap<u32, Time>,
    /// Activity mode's idle grace of the unlisted presence, with its memory level.
    unlisted: Option<UnlistedTrack>,
    /// [`BURST_HOLD`]: when a kernel of ours last showed someone nobody lists.
    burst_from: Option<Time>,
}

/// In activity mode, the unlisted presence as one process: when it last worked (or
/// appeared), and the least memory it has held since (a rise beyond the margin counts
/// as work).
#[derive(Clone, Copy, Debug)]
struct UnlistedTrack {
    last_work: Time,
    level: Option<u64>,
}

impl Timers {
    /// Someone who counts was yielded to at `now`: the grace runs from here.
    pub(super) fn start_grace(&mut self, now: Time) {
        self.grace_from = Some(now);
    }

    /// No grace is owed any more.
    pub(super) fn end_grace(&mut self) {
        self.grace_from = None;
    }

    /// Whether a grace of `grace` started less than that long before `now`.
    pub(super) fn in_grace(&self, now: Time, grace: Duration) -> bool {
        self.grace_from
            .is_some_and(|from| now.saturating_since(from) < grace)
    }

    /// On a GPU where nobody counts: whether to stay idle because a kernel of ours has
    /// just shown someone the list does not (`held_back`), for [`BURST_HOLD`] or until
    /// a `quiet_sample`.
    pub(super) fn burst_hold(&mut self, now: Time, held_back: bool, quiet_sample: bool) -> bool {
        if held_back {
            self.burst_from = Some(now);
        } else if let Some(at) = self.burst_from
            && (now.saturating_since(at) >= BURST_HOLD || quiet_sample)
        {
            self.burst_from = None;
        }
        self.burst_from.is_some()
    }

    /// Activity mode: the `listed` PIDs that worked (or appeared) less than `idle_grace`
    /// ago, given the PIDs the device saw `active`. A holder past its idle grace that
    /// works again sets `burst` instead.
    pub(super) fn working(
        &mut self,
        now: Time,
        listed: &[u32],
        active: &[u32],
        idle_grace: Duration,
        burst: &mut bool,
    ) -> Vec<u32> {
        self.idle_from.retain(|pid, _| listed.contains(pid));
        for &pid in listed {
            // Appearing counts as working: a newcomer's first kernels are near.
            let last = self.idle_from.entry(pid).or_insert(now);
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
            .filter(|pid| now.saturating_since(self.idle_from[pid]) < idle_grace)
            .collect()
    }

    /// The `listed` PIDs first listed less than `idle_grace` before `now`: newcomers,
    /// whose first kernels may be near.
    pub(super) fn newcomers(
        &mut self,
        now: Time,
        listed: &[u32],
        idle_grace: Duration,
    ) -> Vec<u32> {
        self.listed_from.retain(|pid, _| listed.contains(pid));
        listed
            .iter()
            .copied()
            .filter(|pid| {
                let from = *self.listed_from.entry(*pid).or_insert(now);
                now.saturating_since(from) < idle_grace
            })
            .collect()
    }

    /// Activity mode's view of the unlisted presence: whether it is there, and whether
    /// it worked (or appeared, or its memory grew by more than the margin) less than
    /// `idle_grace` ago. Seen only by samples (memory unknown), it is there until it
    /// has been quiet for the idle grace, then forgotten. Work of a presence past its
    /// idle grace sets `burst`.
    pub(super) fn unlisted_working(
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
}
