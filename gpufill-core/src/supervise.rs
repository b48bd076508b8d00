//! Keeping one GPU's loop alive across a lost device: [`Supervisor`].
//!
//! A [`FillLoop`] stops for good when its device is lost or unsupported (the GPU fell
//! off the bus, the driver was unloaded, a CUDA context cannot be made again). The
//! supervisor then drops the loop, which closes its probe and load source, and opens a
//! fresh one through a factory after a delay that doubles on every failure
//! ([`Backoff`]: 1 s, 2 s, 4 s ... up to 5 min by default). While it waits, its ticks
//! say `stopped` with the device idle. A reopened loop that has run for
//! `healthy_after` resets the delay, so a GPU that fails once a day is retried after
//! 1 s again, while one that fails right after every reopen is retried ever less often.
//!
//! One supervisor runs per GPU, so a lost GPU never affects the others.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::controller::Controller;
use crate::device::{LoadSource, Probe};
use crate::drive::{Driven, drive};
use crate::fill::{FillLoop, State, Tick};
use crate::hint::{Hint, NoHint};
use crate::time::{Clock, Time};
use crate::units::{Duty, Utilization, Width};

/// Settings of a [`Supervisor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrySettings {
    /// The first delay after a loss.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
    /// A reopened loop that has run this long without stopping resets the delay.
    pub healthy_after: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            healthy_after: Duration::from_secs(60),
        }
    }
}

/// What the supervisor did in a step, besides the loop's own tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SupervisorEvent {
    /// The loop stopped (its tick says why): it was dropped, to be reopened after `retry_in`.
    Dropped {
        /// Delay before the next attempt.
        retry_in: Duration,
    },
    /// Opening a fresh probe and load source failed.
    OpenFailed {
        /// The factory's message.
        message: String,
        /// Delay before the next attempt.
        retry_in: Duration,
    },
    /// A fresh probe and load source are open: the loop runs again.
    Reopened {
        /// Attempts it took since the loss.
        attempts: u32,
    },
}

/// One supervised step: the loop's tick (a synthetic `stopped` one while no loop is
/// open) and what the supervisor did.
#[derive(Clone, Debug, PartialEq)]
pub struct Supervised {
    /// The tick.
    pub tick: Tick,
    /// The supervisor's event in this step, if any.
    pub event: Option<SupervisorEvent>,
}

/// Runs a [`FillLoop`] and reopens it through `open` after it stops (see the module docs).
pub struct Supervisor<P, L, C, F> {
    open: F,
    fill: Option<FillLoop<P, L, C>>,
    backoff: Backoff,
    retry: RetrySettings,
    retry_at: Time,
    attempts: u32,
    running_since: Option<Time>,
    target: Utilization,
}

impl<P, L, C, E, F> Supervisor<P, L, C, F>
where
    P: Probe,
    L: LoadSource,
    C: Controller,
    E: std::fmt::Display,
    F: FnMut(Time) -> Result<FillLoop<P, L, C>, E>,
{
    /// Supervises `first`; `open` makes a fresh loop (new probe, new load source) at a time.
    pub fn new(first: FillLoop<P, L, C>, open: F, retry: RetrySettings) -> Self {
        Supervisor {
            target: first.settings().target,
            open,
            fill: Some(first),
            backoff: Backoff::new(retry.initial, retry.max),
            retry,
            retry_at: Time::ZERO,
            attempts: 0,
            running_since: None,
        }
    }

    /// The loop, while one is open.
    pub fn fill(&self) -> Option<&FillLoop<P, L, C>> {
        self.fill.as_ref()
    }

    /// Changes the target, also for loops opened later.
    pub fn set_target(&mut self, target: Utilization) {
        self.target = target;
        if let Some(fill) = &mut self.fill {
            fill.set_target(target);
        }
    }

    /// One tick: step the loop, or, while none is open, try to open one when due.
    pub fn step(&mut self, now: Time) -> Supervised {
        self.step_with(now, |fill, now| fill.step(now))
    }

    /// Like [`Supervisor::step`], with the loop stepped by `step` (which calls
    /// [`FillLoop::step`] with extras around it, such as a schedule or metrics).
    pub fn step_with(
        &mut self,
        now: Time,
        step: impl FnOnce(&mut FillLoop<P, L, C>, Time) -> Tick,
    ) -> Supervised {
        let mut event = None;
        if self.fill.is_none() && now >= self.retry_at {
            event = Some(self.reopen(now));
        }
        let Some(fill) = &mut self.fill else {
            return Supervised {
                tick: self.stopped_tick(now),
                event,
            };
        };
        let tick = step(fill, now);
        if tick.state == State::Stopped {
            // Dropping the loop closes its probe and load source (the CUDA context).
            self.fill = None;
            self.running_since = None;
            let retry_in = self.backoff.next_delay();
            self.retry_at = now + retry_in;
            event = Some(SupervisorEvent::Dropped { retry_in });
        } else {
            let since = *self.running_since.get_or_insert(now);
            if now.saturating_since(since) >= self.retry.healthy_after {
                self.backoff.reset();
            }
        }
        Supervised { tick, event }
    }

    fn reopen(&mut self, now: Time) -> SupervisorEvent {
        self.attempts += 1;
        match (self.open)(now) {
            Ok(mut fill) => {
                fill.set_target(self.target);
                self.fill = Some(fill);
                SupervisorEvent::Reopened {
                    attempts: std::mem::take(&mut self.attempts),
                }
            }
            Err(e) => {
                let retry_in = self.backoff.next_delay();
                self.retry_at = now + retry_in;
                SupervisorEvent::OpenFailed {
                    message: e.to_string(),
                    retry_in,
                }
            }
        }
    }

    fn stopped_tick(&self, now: Time) -> Tick {
        Tick {
            at: now,
            state: State::Stopped,
            target: self.target,
            sample: None,
            util: None,
            duty: Duty::ZERO,
            width: Width::ONE_WARP,
            shape: crate::device::LaunchShape::default(),
            foreign: 0,
            probed: None,
            cost: None,
            events: Vec::new(),
        }
    }

    /// Leaves the device idle, if a loop is open (for a shutdown).
    ///
    /// # Errors
    /// The load source's error if the idle load could not be applied.
    pub fn idle(&mut self, now: Time) -> Result<(), L::Error> {
        match &mut self.fill {
            Some(fill) => fill.idle(now),
            None => Ok(()),
        }
    }

    /// Runs a step every `period` on `clock` until `keep_going` returns false, then
    /// leaves the device idle. Unlike [`FillLoop::run`] it does not end when the loop
    /// stops: it keeps reopening. Returns the last step.
    pub fn run<K: Clock>(
        &mut self,
        clock: &K,
        period: Duration,
        keep_going: impl FnMut(&Supervised) -> bool,
    ) -> Supervised {
        self.run_with(clock, period, |fill, now| fill.step(now), keep_going)
    }

    /// Like [`Supervisor::run`], with the loop stepped by `step` (see
    /// [`Supervisor::step_with`]).
    pub fn run_with<K: Clock>(
        &mut self,
        clock: &K,
        period: Duration,
        step: impl FnMut(&mut FillLoop<P, L, C>, Time) -> Tick,
        keep_going: impl FnMut(&Supervised) -> bool,
    ) -> Supervised {
        self.run_watched(clock, period, &mut NoHint, step, keep_going)
    }

    /// Like [`Supervisor::run_with`], and between ticks `hint` may cut the wait short:
    /// then, for [`crate::hint::WATCH_WINDOW`], the process list is read every
    /// [`crate::hint::WATCH_EVERY`] ([`FillLoop::newcomer_listed`], only while filling),
    /// and a newcomer makes the next step come at once. The tick grid goes on as before.
    pub fn run_watched<K: Clock, H: Hint>(
        &mut self,
        clock: &K,
        period: Duration,
        hint: &mut H,
        step: impl FnMut(&mut FillLoop<P, L, C>, Time) -> Tick,
        keep_going: impl FnMut(&Supervised) -> bool,
    ) -> Supervised {
        // A slow reopen overruns its tick: the driver's grid takes no catch-up ticks.
        let last = drive(
            clock,
            period,
            hint,
            &mut Stepping {
                supervisor: self,
                step,
            },
            keep_going,
        );
        // Best effort: a failed idle on a lost device has nothing left to stop.
        let _ = self.idle(clock.now());
        last
    }
}

/// A [`Supervisor`] with the step it runs its loop with, as [`drive`] steps it.
struct Stepping<'a, P, L, C, F, S> {
    supervisor: &'a mut Supervisor<P, L, C, F>,
    step: S,
}

impl<P, L, C, E, F, S> Driven for Stepping<'_, P, L, C, F, S>
where
    P: Probe,
    L: LoadSource,
    C: Controller,
    E: std::fmt::Display,
    F: FnMut(Time) -> Result<FillLoop<P, L, C>, E>,
    S: FnMut(&mut FillLoop<P, L, C>, Time) -> Tick,
{
    type Step = Supervised;

    fn step(&mut self, now: Time) -> Supervised {
        self.supervisor.step_with(now, &mut self.step)
    }

    fn newcomer_listed(&mut self, now: Time) -> bool {
        self.supervisor
            .fill
            .as_mut()
            .is_some_and(|f| f.newcomer_listed(now))
    }
}
