//! [`Reopening`]: a [`LoadSource`] that can be dropped while idle and opened again on
//! demand (no footprint while yielding), and that replaces a source that failed for
//! good (a CUDA context after a sticky launch error) with backoff.
//!
//! A replacement is never made inside the call that saw the failure. The failed source
//! is dropped, the call returns a transient [`ReopenError::Broken`] (the loop reports
//! it as [`crate::Event::LoadFault`]), and calls until the next attempt is due return
//! [`ReopenError::Waiting`]: the load is not running, and every tick says so. Attempts
//! follow a [`Backoff`] (100 ms, 200 ms, 400 ms ... up to 30 s by default), so a
//! context whose every launch fails is reopened a handful of times a minute, not at
//! every tick; a source that has run `healthy_after` since it was opened starts the
//! delays from the beginning again. A factory that fails with a lost or unsupported
//! device stops the loop, and its supervisor takes over ([`crate::supervise`]).

use std::time::Duration;

use crate::backoff::Backoff;
use crate::device::{DeviceError, ErrorKind, LaunchShape, LoadSource};
use crate::gaps::GapReport;
use crate::kernel_timing::OthersSign;
use crate::time::Time;
use crate::units::Load;

/// How a [`Reopening`] spaces its replacements of a failed source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReopenSettings {
    /// Delay before the first replacement after a failure.
    pub initial: Duration,
    /// The longest delay between two replacements.
    pub max: Duration,
    /// A source that has run this long since it was opened resets the delay.
    pub healthy_after: Duration,
}

impl Default for ReopenSettings {
    fn default() -> Self {
        ReopenSettings {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
        }
    }
}

/// An error of a [`Reopening`] source.
#[derive(Debug, thiserror::Error)]
pub enum ReopenError<E> {
    /// The source failed for good and was dropped; a new one is opened after `retry_in`.
    /// Transient: the loop goes on and reports it.
    #[error("{error}; source dropped, a new one in {:.1} s", retry_in.as_secs_f64())]
    Broken {
        /// The source's error.
        error: E,
        /// Delay before the replacement.
        retry_in: Duration,
    },
    /// No source runs: the last one failed, and its replacement is due in `retry_in`.
    /// Transient.
    #[error(
        "the last load source failed for good; a new one in {:.1} s",
        retry_in.as_secs_f64()
    )]
    Waiting {
        /// Time left before the replacement.
        retry_in: Duration,
    },
    /// The source's own error (transient ones, and any from `release`), or the
    /// factory's when it could not open a replacement; classified as it was.
    #[error(transparent)]
    Source(E),
}

impl<E: DeviceError> DeviceError for ReopenError<E> {
    fn kind(&self) -> ErrorKind {
        match self {
            ReopenError::Broken { .. } | ReopenError::Waiting { .. } => ErrorKind::Transient,
            ReopenError::Source(e) => e.kind(),
        }
    }
}

/// A [`LoadSource`] that can be dropped while idle and opened again on demand: the
/// generic half of "no footprint while yielding". `open` makes a fresh source (a new
/// CUDA context); [`LoadSource::release`] drops the current one. A source that fails for
/// good is replaced with backoff (see the module docs).
pub struct Reopening<L, F> {
    open: F,
    current: Option<L>,
    /// The load last asked for, given to a source opened to replace a failed one.
    load: Load,
    /// The shape last asked for, likewise.
    shape: LaunchShape,
    /// The hold after a meeting while filling gaps, handed to every new source.
    gap_hold: Duration,
    backoff: Backoff,
    settings: ReopenSettings,
    /// After a failure: when the replacement may be opened.
    retry_at: Option<Time>,
    /// When the current source was opened by us (`None` for the first one).
    opened_at: Option<Time>,
}

impl<L: LoadSource, F: FnMut() -> Result<L, L::Error>> Reopening<L, F> {
    /// Wraps an open source; `open` makes the next one, with the default
    /// [`ReopenSettings`].
    pub fn new(first: L, open: F) -> Self {
        Self::with_settings(first, open, ReopenSettings::default())
    }

    /// Like [`Reopening::new`], with the given spacing of replacements.
    pub fn with_settings(first: L, open: F, settings: ReopenSettings) -> Self {
        Reopening {
            open,
            current: Some(first),
            load: Load::IDLE,
            shape: LaunchShape::default(),
            gap_hold: crate::gaps::MIN_HOLD,
            backoff: Backoff::new(settings.initial, settings.max),
            settings,
            retry_at: None,
            opened_at: None,
        }
    }

    /// The source in use, `None` while released or waiting to replace a failed one.
    pub fn current(&self) -> Option<&L> {
        self.current.as_ref()
    }

    /// The source to use at `now`, opened if none is (after a release, or a failure
    /// whose delay has passed); `None` while released with nothing to run.
    fn source(&mut self, now: Time) -> Result<Option<&mut L>, ReopenError<L::Error>> {
        if self.current.is_none() {
            if self.load.is_idle() {
                return Ok(None);
            }
            if let Some(at) = self.retry_at.filter(|&at| now < at) {
                return Err(ReopenError::Waiting {
                    retry_in: at.saturating_since(now),
                });
            }
            let fresh = (self.open)().map_err(|e| self.open_failed(now, e))?;
            self.retry_at = None;
            self.opened_at = Some(now);
            let mut fresh = fresh;
            fresh.set_shape(self.shape);
            fresh.set_gap_hold(self.gap_hold);
            self.current = Some(fresh);
        }
        Ok(self.current.as_mut())
    }

    /// The factory failed: a transient failure is retried after the next delay; a lost
    /// or unsupported device is returned as it is (the loop stops).
    fn open_failed(&mut self, now: Time, error: L::Error) -> ReopenError<L::Error> {
        if error.kind() == ErrorKind::Transient {
            return self.broken(now, error);
        }
        ReopenError::Source(error)
    }

    /// Sorts a source's error: one that is not transient drops the source and sets
    /// the time of its replacement.
    fn check(
        &mut self,
        now: Time,
        result: Result<(), L::Error>,
    ) -> Result<(), ReopenError<L::Error>> {
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::Transient => Err(ReopenError::Source(e)),
            Err(e) => {
                self.current = None;
                Err(self.broken(now, e))
            }
        }
    }

    fn broken(&mut self, now: Time, error: L::Error) -> ReopenError<L::Error> {
        let healthy = self
            .opened_at
            .is_none_or(|at| now.saturating_since(at) >= self.settings.healthy_after);
        if healthy {
            self.backoff.reset();
        }
        let retry_in = self.backoff.next_delay();
        self.retry_at = Some(now + retry_in);
        ReopenError::Broken { error, retry_in }
    }
}

impl<L: LoadSource, F: FnMut() -> Result<L, L::Error>> LoadSource for Reopening<L, F> {
    type Error = ReopenError<L::Error>;

    /// Applies `load` to the current source, opening one if needed and due. A source
    /// that fails for good is dropped (the idle load then holds: a dropped context runs
    /// nothing) and replaced later, not in this call.
    fn set_load(&mut self, now: Time, load: Load) -> Result<(), Self::Error> {
        self.load = load;
        let Some(source) = self.source(now)? else {
            return Ok(());
        };
        let result = source.set_load(now, load);
        match self.check(now, result) {
            Err(ReopenError::Broken { .. }) if load.is_idle() => Ok(()),
            other => other,
        }
    }

    /// Launches what is due on the current source; while none runs with a load in
    /// force, opens the replacement when due, hands it that load and launches, or says
    /// that the load is not running.
    fn launch_due(&mut self, now: Time) -> Result<(), Self::Error> {
        let (fresh, load) = (self.current.is_none(), self.load);
        let Some(source) = self.source(now)? else {
            return Ok(());
        };
        let result = if fresh {
            source
                .set_load(now, load)
                .and_then(|()| source.launch_due(now))
        } else {
            source.launch_due(now)
        };
        self.check(now, result)
    }

    fn release(&mut self, now: Time) -> Result<(), Self::Error> {
        if let Some(mut source) = self.current.take() {
            source
                .set_load(now, Load::IDLE)
                .map_err(ReopenError::Source)?;
            source.release(now).map_err(ReopenError::Source)?;
        }
        Ok(())
    }

    fn set_shape(&mut self, shape: LaunchShape) {
        self.shape = shape;
        if let Some(source) = &mut self.current {
            source.set_shape(shape);
        }
    }

    fn others_seen(&mut self) -> Option<OthersSign> {
        self.current.as_mut().and_then(LoadSource::others_seen)
    }

    fn gaps_seen(&mut self) -> GapReport {
        self.current
            .as_mut()
            .map(LoadSource::gaps_seen)
            .unwrap_or_default()
    }

    fn set_gap_hold(&mut self, hold: Duration) {
        self.gap_hold = hold;
        if let Some(source) = &mut self.current {
            source.set_gap_hold(hold);
        }
    }

    /// Probes with the current source, opening one when due. A source opened for the
    /// probe has run only its own first kernel, so after `release_context` the probe
    /// speaks for the time since then, not for the time without a context.
    fn probe(&mut self, now: Time) -> Result<Option<bool>, Self::Error> {
        let Some(source) = self.source(now)? else {
            return Ok(None);
        };
        match source.probe(now) {
            Ok(found) => Ok(found),
            Err(e) => self.check(now, Err(e)).map(|()| None),
        }
    }

    /// False while a load is asked for and no source runs it (a replacement awaited).
    fn is_running(&self) -> bool {
        self.load.is_idle() || self.current.as_ref().is_some_and(LoadSource::is_running)
    }
}
