//! A reload's logic, without its I/O: when a config file being written is complete, and
//! the two phases of putting new settings in force. The caller reads the file, parses
//! it and logs; [`Reload`] decides, given the time (it reads the wall clock only to age
//! a modification time) and what a [`Watch`] on the file's writers saw: [`FileWatch`],
//! inotify on the file's directory, or any other. The `gpufill` binary drives it from
//! SIGHUP with a [`FileWatch`] and its TOML file; an embedder that reloads its own
//! settings file can drive it the same way.
//!
//! A reload can race an editor or a script that is writing the file, and an empty or
//! cut-short file may still parse. So a reload takes only a complete file. With a watch
//! that follows the file's writers ([`Seen`]), a writer in place is waited for until it
//! closes the file, a file renamed over it is complete as it lands, and a read during
//! which the file changed is read again. Without one, the file must have settled: two
//! reads [`Settle::quiet`] apart give the same text and modification time, and that
//! time is at least `quiet` old. Either way a file still being written after
//! [`Settle::limit`] is refused ([`Next::Unsettled`]).
//!
//! The wait never blocks: [`Reload::next`] answers at once, and a reload that waits for
//! its file is taken up again at the next call. A reload is two-phase: the caller turns
//! the complete text into new settings, hands them to its workers as a [`Proposal`],
//! and only then [`Reload::commit`]s them (they are then in force) or drops the
//! proposal (the settings in force stay). [`ReloadStatus`] serves that final outcome as
//! Prometheus series ([`SERIES`]).

use std::time::{Duration, Instant, SystemTime};

mod status;
mod watch;

pub use status::{ReloadStatus, SERIES};
pub use watch::FileWatch;

/// How a reload waits for a file that is being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Without a watch: how long the file must stay unchanged, and the least time
    /// between the two reads that must agree.
    pub quiet: Duration,
    /// How long to wait for the writer before refusing the reload.
    pub limit: Duration,
}

impl Default for Settle {
    fn default() -> Self {
        Settle {
            quiet: Duration::from_millis(100),
            limit: Duration::from_secs(2),
        }
    }
}

/// What a watch on the file's writers saw since it was last asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// A writer has written to the file in place and not closed it yet.
    pub writing: bool,
    /// Something happened to the file since the last look (a write, a close after a
    /// write, a rename onto it, its removal), or events were lost.
    pub changed: bool,
}

/// A watch on the file's writers, as [`Reload::next`] asks it.
pub trait Watch {
    /// Whether the watch follows the file (else a reload waits for the file to settle).
    fn active(&self) -> bool;

    /// What happened since the last call (without waiting).
    fn update(&mut self) -> Seen;
}

/// A read of the file: its text and modification time.
pub type Read = (String, Option<SystemTime>);

/// What a waiting reload does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Load this text.
    Load(String),
    /// Look again at the next call.
    Wait,
    /// The writer did not finish within the limit.
    GiveUp,
}

/// A reload asked for, taken one step by [`Reload::next`].
#[derive(Debug, PartialEq, Eq)]
pub enum Next<E> {
    /// The file is being written: call again. `first` for the first wait of this reload
    /// (to say so once).
    Waiting {
        /// Whether this reload waited before.
        first: bool,
    },
    /// The file's complete text: turn it into settings and [`Reload::propose`] them, or
    /// refuse it.
    Text(String),
    /// The file kept being written for as long as [`Settle::limit`]: refused.
    Unsettled(Duration),
    /// Reading the file failed: refused.
    Failed(E),
}

/// A reload that waits for its file: since when, and, without a watch, the settle rule
/// of the module docs, one read per call.
#[derive(Debug)]
struct Settling {
    /// When the reload was asked for: the limit counts from here.
    since: Instant,
    last: Option<(Read, Instant)>,
}

impl Settling {
    fn new(now: Instant) -> Self {
        Settling {
            since: now,
            last: None,
        }
    }

    /// Takes `read`, made at `now`: the text once it agrees with a read at least
    /// `settle.quiet` older and its modification time is that old (a time in the future,
    /// after a clock step, counts as old).
    fn next(&mut self, read: Read, now: Instant, settle: Settle) -> Step {
        let quiet = read
            .1
            .and_then(|at| SystemTime::now().duration_since(at).ok())
            .is_none_or(|age| age >= settle.quiet);
        match &self.last {
            Some((last, at)) if quiet && *last == read => {
                if now.duration_since(*at) >= settle.quiet {
                    return Step::Load(read.0);
                }
            }
            _ => self.last = Some((read, now)),
        }
        self.wait(now, settle)
    }

    /// Waits on at `now`, or gives up once `settle.limit` has passed since the reload
    /// was asked for.
    fn wait(&self, now: Instant, settle: Settle) -> Step {
        if now.duration_since(self.since) >= settle.limit {
            Step::GiveUp
        } else {
            Step::Wait
        }
    }
}

/// A reload asked for and not yet answered.
#[derive(Debug)]
struct Pending {
    /// Since when it waits, and without a watch the reads so far.
    settling: Settling,
    /// Whether it has waited for the writer before.
    told: bool,
}

/// New settings from the file, not yet in force: hand them to the workers, then
/// [`Reload::commit`] them, or drop them to keep the settings in force.
#[derive(Debug)]
#[must_use = "a proposal is committed or refused"]
pub struct Proposal<C> {
    config: C,
    kept: Vec<&'static str>,
}

impl<C> Proposal<C> {
    /// The settings proposed.
    pub fn config(&self) -> &C {
        &self.config
    }
}

/// A reload's state: the settings in force, of any type `C`, and the reload asked for,
/// if any, while it waits for its file.
#[derive(Debug)]
pub struct Reload<C> {
    current: C,
    settle: Settle,
    pending: Option<Pending>,
}

impl<C> Reload<C> {
    /// `current` in force, no reload asked, waiting for writers as [`Settle::default`].
    pub fn new(current: C) -> Self {
        Reload {
            current,
            settle: Settle::default(),
            pending: None,
        }
    }

    /// Waits for a file being written as `settle` says.
    #[must_use]
    pub fn with_settle(mut self, settle: Settle) -> Self {
        self.settle = settle;
        self
    }

    /// How it waits for a file being written.
    pub fn settle(&self) -> Settle {
        self.settle
    }

    /// Asks for a reload at `now` (a second request while one waits is the same one).
    pub fn request(&mut self, now: Instant) {
        if self.pending.is_none() {
            self.pending = Some(Pending {
                settling: Settling::new(now),
                told: false,
            });
        }
    }

    /// Whether a reload is asked for and not yet answered.
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Takes the reload asked for one step at `now`; `None` when none is. `watched` is
    /// the watch on the file's writers with what it saw since the last call, when there
    /// is one; `read` reads the file. With an active watch, it waits while the file is
    /// being written and reads it once it is not; without, the settle rule. Every
    /// answer but [`Next::Waiting`] ends the reload asked for.
    pub fn next<W: Watch + ?Sized, E>(
        &mut self,
        now: Instant,
        watched: Option<(&mut W, Seen)>,
        mut read: impl FnMut() -> Result<Read, E>,
    ) -> Option<Next<E>> {
        let pending = self.pending.as_mut()?;
        let step = match watched {
            Some((watch, seen)) if watch.active() => {
                if seen.writing {
                    Ok(pending.settling.wait(now, self.settle))
                } else {
                    read_complete(watch, read)
                }
            }
            _ => read().map(|r| pending.settling.next(r, now, self.settle)),
        };
        let next = match step {
            Ok(Step::Wait) => {
                return Some(Next::Waiting {
                    first: !std::mem::replace(&mut pending.told, true),
                });
            }
            Ok(Step::Load(text)) => Next::Text(text),
            Ok(Step::GiveUp) => Next::Unsettled(self.settle.limit),
            Err(e) => Next::Failed(e),
        };
        self.pending = None;
        Some(next)
    }

    /// `config` as new settings not yet in force; `kept` names the keys that changed
    /// but keep their values in force (they need a restart).
    pub fn propose(&self, config: C, kept: Vec<&'static str>) -> Proposal<C> {
        Proposal { config, kept }
    }

    /// Makes `proposal` the settings in force, once its receiver has taken them;
    /// returns the keys it kept for a restart.
    pub fn commit(&mut self, proposal: Proposal<C>) -> Vec<&'static str> {
        self.current = proposal.config;
        proposal.kept
    }

    /// The settings in force.
    pub fn current(&self) -> &C {
        &self.current
    }
}

/// With the watch: the file's text when a read met no event on it, or wait for a
/// writer that began writing during the read. A file replaced whole (or removed) during
/// the read is read again, a few times; the last complete one read wins.
fn read_complete<W: Watch + ?Sized, E>(
    watch: &mut W,
    mut read: impl FnMut() -> Result<Read, E>,
) -> Result<Step, E> {
    let mut last = None;
    for _ in 0..3 {
        let text = read();
        let seen = watch.update();
        if seen.writing {
            return Ok(Step::Wait);
        }
        if !seen.changed {
            return text.map(|(text, _)| Step::Load(text));
        }
        last = text.ok();
    }
    Ok(last.map_or(Step::Wait, |(text, _)| Step::Load(text)))
}

#[cfg(test)]
mod tests;
