//! Seeing a newcomer between ticks: the loop reads the process list once a tick (50 ms
//! by default), so a newcomer listed just after a read would wait up to a tick before
//! gpufill yields. Reading the list every few milliseconds all the time would cost a
//! wake-up each (tens of microseconds of CPU on an idle host). Instead a [`Hint`] (the
//! runtime watches the NVIDIA device files, which every new CUDA process opens before
//! NVML lists it) cuts the wait short, and only then is the list read every
//! [`WATCH_EVERY`] for [`WATCH_WINDOW`] ([`crate::Supervisor::run_watched`]).

use std::time::Duration;

use crate::time::{Clock, Time};

/// How often the process list is read after a hint, while kernels of ours may run: a
/// newcomer is yielded to at most this long after its listing (the goal is 5 ms), and
/// each read costs a wake-up and an NVML call (what each costs in CPU:
/// docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host,
/// "Where the loop thread's CPU goes").
pub const WATCH_EVERY: Duration = Duration::from_millis(3);

/// How long after a hint the list is read every [`WATCH_EVERY`]: two and a half times
/// what a CUDA process took from opening the device files to its listing
/// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on,
/// on a newcomer). A process that only opens them
/// (nvidia-smi, a framework probing the devices at import, a monitor) costs one window
/// of reads: 50 at most.
pub const WATCH_WINDOW: Duration = Duration::from_millis(150);

/// Something that can cut the wait between two ticks short.
pub trait Hint {
    /// Waits on `clock` until `deadline`, or until something suggests that a new
    /// process may be starting on the GPU: `true` when cut short.
    fn wait_until<K: Clock>(&mut self, clock: &K, deadline: Time) -> bool;
}

/// No hints: the wait always runs to its deadline.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHint;

impl Hint for NoHint {
    fn wait_until<K: Clock>(&mut self, clock: &K, deadline: Time) -> bool {
        clock.sleep_until(deadline);
        false
    }
}

/// Hints at the given times (for tests and simulations): each cuts the wait it falls in.
#[derive(Clone, Debug, Default)]
pub struct HintsAt {
    /// When, in time order; each is used once.
    pub at: std::collections::VecDeque<Time>,
}

impl Hint for HintsAt {
    fn wait_until<K: Clock>(&mut self, clock: &K, deadline: Time) -> bool {
        while self.at.front().is_some_and(|&t| t < clock.now()) {
            self.at.pop_front();
        }
        match self.at.front().copied() {
            Some(t) if t < deadline => {
                clock.sleep_until(t);
                self.at.pop_front();
                true
            }
            _ => {
                clock.sleep_until(deadline);
                false
            }
        }
    }
}

/// Waits on `clock` until `next` (a tick), or less when `newcomer` says a newcomer is
/// listed: after `hint` cuts a wait short, and for [`WATCH_WINDOW`] after, `newcomer` is
/// asked every [`WATCH_EVERY`] ([`crate::FillLoop::newcomer_listed`]). `watch_until` is
/// the end of a window still open from the last wait; the result is the one to pass to
/// the next (`None` when closed).
pub fn wait_for_tick<K: Clock, H: Hint>(
    clock: &K,
    next: Time,
    hint: &mut H,
    mut watch_until: Option<Time>,
    mut newcomer: impl FnMut(Time) -> bool,
) -> Option<Time> {
    loop {
        let now = clock.now();
        if now >= next {
            return watch_until;
        }
        match watch_until {
            Some(until) if now < until => {
                if newcomer(now) {
                    return None;
                }
                clock.sleep_until((now + WATCH_EVERY).min(next));
            }
            _ => {
                // A wait that ran out is the tick (a hair early by our clock at most:
                // waiting again for that would cost a wake-up).
                if !hint.wait_until(clock, next) {
                    return None;
                }
                watch_until = Some(clock.now() + WATCH_WINDOW);
            }
        }
    }
}
