//! What the rule weighs in one tick: [`Seen`], and the part of it that the process
//! list misses ([`Hidden`]).

use crate::device::ProcessInfo;
use crate::kernel_timing::OthersSign;
use crate::unlisted::Unlisted;

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
    /// The strongest sign a kernel of ours showed of another context's work since the
    /// last tick ([`crate::LoadSource::others_seen`]): it started a context switch late,
    /// ran long, was preempted or held back. A late start alone is weak: the host's own
    /// jitter can fake it ([`crate::kernel_timing`]).
    pub held_back: Option<OthersSign>,
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
            held_back: None,
        }
    }
}

/// What the device shows of unlisted processes in one tick.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hidden {
    /// Device memory beyond the listed processes, when the probe reads it.
    pub(super) memory: Option<u64>,
    /// Seen working: samples of PIDs nobody lists, or (presence mode) utilization
    /// beyond our own load.
    pub(super) working: bool,
}

impl Hidden {
    /// Whether someone unlisted is there at all.
    pub(super) fn there(self) -> bool {
        self.memory.is_some() || self.working
    }
}
