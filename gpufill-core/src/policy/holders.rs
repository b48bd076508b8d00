//! Activity mode's judgement of the quiet holders of a context ([`Holders`]): filling
//! beside them once a probe found them dormant, holding off for [`live_hold`] after a
//! sign of life, probing again when a hold ends.

use std::time::Duration;

use super::decision::{Decision, live_hold};
use crate::device::ProcessInfo;
use crate::time::Time;

/// What is known of the quiet holders, and of whom gpufill last yielded to.
#[derive(Clone, Debug, Default)]
pub(super) struct Holders {
    beside: Beside,
    /// Who was present when the last [`Decision::Probe`] was asked for.
    probing: Option<(Vec<u32>, bool)>,
    /// The working PIDs of the last yield (and whether someone unlisted was among
    /// them), to tell at the end of a yield whether they left (the grace applies) or
    /// went quiet (fill beside them at once).
    last_yield: Option<(Vec<u32>, bool)>,
}

/// Whether gpufill may fill beside the quiet holders.
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

impl Holders {
    /// Whether a probe has judged the holders (filling beside them, or holding off).
    pub(super) fn judged(&self) -> bool {
        self.beside != Beside::Unknown
    }

    /// gpufill yields to `pids` (and someone unlisted): someone new or working, so
    /// whatever was known of the holders is stale.
    pub(super) fn yielded(&mut self, pids: Vec<u32>, unlisted: bool) {
        self.last_yield = Some((pids, unlisted));
        self.beside = Beside::Unknown;
    }

    /// Nobody is there: forget the holders and the last yield.
    pub(super) fn forget(&mut self) {
        self.beside = Beside::Unknown;
        self.last_yield = None;
    }

    /// Whether the processes of the last yield all went quiet and stayed (`listed`, and
    /// someone unlisted still `unlisted_there` if one was among them), rather than one
    /// leaving: quiet holders are owed no grace. Asked once per yield.
    pub(super) fn stayed_after_yield(
        &mut self,
        listed: &[ProcessInfo],
        unlisted_there: bool,
    ) -> bool {
        let Some((pids, was_unlisted)) = self.last_yield.take() else {
            return false;
        };
        let left = pids.iter().any(|pid| !listed.iter().any(|p| p.pid == *pid))
            || (was_unlisted && !unlisted_there);
        !left
    }

    /// Everyone `present` quiet for the idle grace: fill beside them while a probe has
    /// found them dormant, hold off for [`live_hold`] after any sign of life
    /// (`evidence`), probe when a hold ends or nothing is known yet.
    pub(super) fn decide(
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

    /// The answer to a [`Decision::Probe`] (see `YieldPolicy::probed`).
    pub(super) fn probed(
        &mut self,
        now: Time,
        idle_grace: Duration,
        someone_ran: Option<bool>,
    ) -> Decision {
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
}
