//! Activity mode's judgement of the quiet holders of a context ([`Holders`]): filling
//! beside them once a probe found them dormant, holding off for [`live_hold`] after a
//! sign of life, probing again when a hold ends.
//!
//! A probe asks whether anyone ran since our previous kernel. At the end of a hold that
//! kernel is the one that showed the holder's work, so the probe would see the very
//! burst that made us hold: a holder that ran one short burst was filled beside again
//! only after a second idle grace (in simulation:
//! docs/benchmarks.md#holding-the-target-host-by-host-0-pauses-in-10-minutes). So each
//! hold runs a **marker** probe at its midpoint, whose answer only marks the time: the
//! probe at the end of the hold then speaks for its second half alone, and a holder
//! quiet since the first half is filled beside one hold after its last sign. (Not once
//! a holder was found live at the end of two holds in a row: each probe costs a live
//! service's next request one switch.)
//!
//! Two more probes would speak for too long a time, so each pauses only for
//! [`CONFIRM_AFTER`] and a second probe then decides ([`Beside::Confirming`]):
//! - a late start of ours alone ([`Evidence::Weak`]): it can be the host's own jitter
//!   (docs/benchmarks.md#start-jitter-on-an-empty-gpu-labpy-jitter-scriptsjitter_sessionsh);
//! - the first probe beside newcomers that went quiet: it speaks for the time since our
//!   last kernel before they came, their start-up included.
//!
//! Found again, the holder is held off as after any other sign.

use std::time::Duration;

use super::decision::{CONFIRM_AFTER, Decision, live_hold};
use crate::device::ProcessInfo;
use crate::kernel_timing::OthersSign;
use crate::time::Time;

/// What is known of the quiet holders, and of whom gpufill last yielded to.
#[derive(Clone, Debug, Default)]
pub(super) struct Holders {
    beside: Beside,
    /// Who was present when the last [`Decision::Probe`] was asked for, and whether it
    /// is a hold's marker.
    probing: Option<((Vec<u32>, bool), bool)>,
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
    /// found it working. The marker probe is due at `mark` (`None` once run).
    Holding {
        until: Time,
        lates: u32,
        mark: Option<Time>,
    },
    /// A late start of ours alone: idle until `until`, then probe.
    Confirming { until: Time, lates: u32 },
}

impl Beside {
    /// A hold from `now` for `hold`, with its marker probe at the midpoint unless the
    /// holder has been found live at the end of two holds in a row (`lates` 2 or more):
    /// a live service pays a switch for each probe, and is filled beside again a hold
    /// later at most once it goes quiet.
    fn hold(now: Time, hold: Duration, lates: u32) -> Beside {
        Beside::Holding {
            until: now + hold,
            lates,
            mark: (lates <= 1).then(|| now + hold / 2),
        }
    }
}

/// What the policy has seen of the holders' work in one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum Evidence {
    /// Nothing.
    #[default]
    None,
    /// Only a late start of one of our kernels: the host can fake it.
    Weak(OthersSign),
    /// Work that only another context makes: a preemption, a kernel held back, a run
    /// too long (the sign, when our kernels showed it), NVML's samples or utilization
    /// beyond our own (`None`).
    Strong(Option<OthersSign>),
}

impl Evidence {
    /// The sign of our kernels' timing that is the evidence, if it is.
    fn sign(self) -> Option<OthersSign> {
        match self {
            Evidence::None => None,
            Evidence::Weak(sign) => Some(sign),
            Evidence::Strong(sign) => sign,
        }
    }
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
    /// (`evidence`; a weak one first waits for a confirming probe), probe when a hold
    /// ends (or at its midpoint, as a marker) or nothing is known yet.
    pub(super) fn decide(
        &mut self,
        now: Time,
        idle_grace: Duration,
        evidence: Evidence,
        present: (Vec<u32>, bool),
    ) -> Decision {
        self.beside = match (self.beside, evidence) {
            (Beside::Filling { since, lates }, Evidence::Weak(_) | Evidence::Strong(_)) => {
                // Dormant for a whole idle grace: the backoff starts afresh.
                let lates = if now.saturating_since(since) >= idle_grace {
                    0
                } else {
                    lates
                };
                if matches!(evidence, Evidence::Weak(_)) {
                    Beside::Confirming {
                        until: now + confirm_after(idle_grace),
                        lates,
                    }
                } else {
                    Beside::hold(now, live_hold(idle_grace, lates), lates)
                }
            }
            (Beside::Holding { until, lates, .. }, Evidence::Weak(_) | Evidence::Strong(_)) => {
                let until = until.max(now + live_hold(idle_grace, lates));
                Beside::hold(now, until.saturating_since(now), lates)
            }
            // Idle while confirming, so only NVML can show work now.
            (Beside::Confirming { lates, .. }, Evidence::Strong(_)) => {
                Beside::hold(now, live_hold(idle_grace, lates), lates)
            }
            (other, _) => other,
        };
        match self.beside {
            Beside::Filling { .. } => Decision::FillBeside,
            Beside::Holding {
                until,
                mark: Some(mark),
                ..
            } if now < until && now >= mark => {
                self.probing = Some((present, true));
                Decision::Probe
            }
            Beside::Holding { until, .. } | Beside::Confirming { until, .. } if now < until => {
                Decision::Pause {
                    pids: present.0,
                    unlisted: present.1,
                    sign: evidence.sign(),
                }
            }
            Beside::Unknown | Beside::Holding { .. } | Beside::Confirming { .. } => {
                self.probing = Some((present, false));
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
        let ((pids, unlisted), marker) = self.probing.take().unwrap_or_default();
        match self.beside {
            // A marker only marks the time: the hold goes on.
            Beside::Holding { until, lates, .. } if marker => {
                self.beside = Beside::Holding {
                    until,
                    lates,
                    mark: None,
                };
                return Decision::Pause {
                    pids,
                    unlisted,
                    sign: None,
                };
            }
            _ => {}
        }
        let lates = match self.beside {
            Beside::Holding { lates, .. }
            | Beside::Filling { lates, .. }
            | Beside::Confirming { lates, .. } => lates,
            Beside::Unknown => 0,
        };
        if someone_ran == Some(true) {
            self.beside = match self.beside {
                // The first probe beside them asks about the time since our last kernel
                // before they came, their start-up included: confirm it first.
                Beside::Unknown => Beside::Confirming {
                    until: now + confirm_after(idle_grace),
                    lates,
                },
                _ => {
                    let lates = lates.saturating_add(1);
                    Beside::hold(now, live_hold(idle_grace, lates), lates)
                }
            };
            return Decision::Pause {
                pids,
                unlisted,
                sign: None,
            };
        }
        self.beside = Beside::Filling { since: now, lates };
        Decision::FillBeside
    }
}

/// How long a late start of ours alone pauses before the confirming probe:
/// [`CONFIRM_AFTER`], at most the idle grace.
fn confirm_after(idle_grace: Duration) -> Duration {
    CONFIRM_AFTER.min(idle_grace)
}
