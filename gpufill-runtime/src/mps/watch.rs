//! [`DaemonWatch`]: following the MPS control daemon while gpufill runs.

use std::time::Instant;

use super::{Daemon, WATCH_CONFIRM, WATCH_EVERY};

/// One look at the pipe directory ([`super::look`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// What runs there.
    pub daemon: Daemon,
    /// The daemon's PID, where one runs or quits.
    pub pid: Option<u32>,
    /// Our MPS server, where one is seen: the one known so far while it lasts, else the
    /// first found ([`super::server_of`]).
    pub server: Option<u32>,
}

impl Seen {
    /// A look that found `daemon` and nothing more (no PID, no server).
    pub fn only(daemon: Daemon) -> Seen {
        Seen {
            daemon,
            pid: None,
            server: None,
        }
    }
}

/// What calls for this process to start afresh, as [`DaemonWatch::poll`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A daemon runs that this process is not a client of: start afresh as its client.
    Started,
    /// The daemon this process is a client of has stopped (or another runs in its
    /// place): start afresh, without MPS or as the new one's client.
    Stopped,
    /// The daemon this process is a client of (its PID) was told to quit and waits for
    /// its clients: leave it ([`super::Left`]).
    Quitting(u32),
    /// Our MPS server ended while its daemon (its PID) runs: our contexts went with it.
    ServerLost(u32),
}

/// Follows the MPS control daemon while gpufill runs, against what this process began
/// with: its CUDA contexts are clients of the daemon that ran then, or of none, for good
/// (see the module docs). Looks at most every [`WATCH_EVERY`]. A daemon that starts or
/// stops, or a server that is gone, counts once [`WATCH_CONFIRM`] looks in a row agree,
/// so a daemon caught between its endpoint and its PID file is not a change; a quit
/// counts at once (the log does not take it back).
#[derive(Debug)]
pub struct DaemonWatch {
    client: bool,
    /// The daemon this process has left (never followed again).
    left: Option<u32>,
    /// The daemon this process is a client of, once seen.
    daemon: Option<u32>,
    /// Our MPS server, once seen.
    server: Option<u32>,
    last: Option<Instant>,
    differing: u32,
    untrusted: Option<String>,
}

impl DaemonWatch {
    /// A watch for a process whose contexts are MPS clients (`client`) or not.
    pub fn new(client: bool) -> Self {
        DaemonWatch {
            client,
            left: None,
            daemon: None,
            server: None,
            last: None,
            differing: 0,
            untrusted: None,
        }
    }

    /// A watch for a process that has left the daemon `daemon` ([`super::Left`]): not a
    /// client, and following only a daemon of another PID.
    pub fn having_left(daemon: u32) -> Self {
        DaemonWatch {
            left: Some(daemon),
            ..DaemonWatch::new(false)
        }
    }

    /// The MPS server this watch has seen ours, to pass to the next look.
    pub fn server(&self) -> Option<u32> {
        self.server
    }

    /// At `now`, looks with `look` (given [`DaemonWatch::server`]) if a look is due, and
    /// says what calls for a fresh start, if anything. An untrusted endpoint counts as
    /// no daemon, and its reason is logged once.
    pub fn poll(&mut self, now: Instant, look: impl FnOnce(Option<u32>) -> Seen) -> Option<Change> {
        if self
            .last
            .is_some_and(|at| now.saturating_duration_since(at) < WATCH_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        let mut seen = look(self.server);
        if let Daemon::Untrusted(why) = &seen.daemon {
            if self.untrusted.as_ref() != Some(why) {
                tracing::warn!("not trusted as an MPS control daemon: {why}");
                self.untrusted = Some(why.clone());
            }
            seen = Seen::only(Daemon::Absent);
        }
        if self.client {
            self.as_client(&seen)
        } else {
            self.as_other(&seen)
        }
    }

    /// Counts one more look that calls for `change`; it is due once confirmed.
    fn confirm(&mut self, change: Change) -> Option<Change> {
        self.differing += 1;
        (self.differing >= WATCH_CONFIRM).then_some(change)
    }

    fn as_client(&mut self, seen: &Seen) -> Option<Change> {
        let ours = *self.daemon.get_or_insert(seen.pid.unwrap_or(0));
        let same = seen.pid.is_some_and(|pid| ours == 0 || pid == ours);
        match (&seen.daemon, seen.pid) {
            (Daemon::Quitting, Some(pid)) if same => {
                self.differing = 0;
                Some(Change::Quitting(pid))
            }
            (Daemon::Running, Some(pid)) if same => {
                self.daemon = Some(pid);
                match (self.server, seen.server) {
                    (None, found) => {
                        self.server = found;
                        self.differing = 0;
                        None
                    }
                    (Some(_), Some(_)) => {
                        self.differing = 0;
                        None
                    }
                    (Some(_), None) => self.confirm(Change::ServerLost(pid)),
                }
            }
            // None, or another daemon in place of ours.
            _ => self.confirm(Change::Stopped),
        }
    }

    fn as_other(&mut self, seen: &Seen) -> Option<Change> {
        let new = seen.daemon == Daemon::Running && seen.pid.is_none_or(|p| Some(p) != self.left);
        if new {
            self.confirm(Change::Started)
        } else {
            self.differing = 0;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(start: Instant, s: u64) -> Instant {
        start + Duration::from_secs(s)
    }

    fn running(pid: u32, server: Option<u32>) -> Seen {
        Seen {
            daemon: Daemon::Running,
            pid: Some(pid),
            server,
        }
    }

    #[test]
    fn the_watch_reports_a_change_after_two_looks_a_second_apart_and_not_before() {
        let start = Instant::now();
        let ms = |ms: u64| start + Duration::from_millis(ms);
        let mut watch = DaemonWatch::new(false);
        assert_eq!(watch.poll(ms(0), |_| Seen::only(Daemon::Absent)), None);
        // Not due yet: the look is not even taken.
        assert_eq!(watch.poll(ms(500), |_| panic!("looked too soon")), None);
        assert_eq!(watch.poll(ms(1000), |_| running(7, None)), None, "one look");
        assert_eq!(
            watch.poll(ms(2000), |_| running(7, None)),
            Some(Change::Started)
        );
        // A flicker resets the count.
        let mut watch = DaemonWatch::new(false);
        assert_eq!(watch.poll(ms(0), |_| running(7, None)), None);
        assert_eq!(watch.poll(ms(1000), |_| Seen::only(Daemon::Absent)), None);
        assert_eq!(watch.poll(ms(2000), |_| running(7, None)), None);
        assert_eq!(
            watch.poll(ms(3000), |_| running(7, None)),
            Some(Change::Started)
        );
    }

    #[test]
    fn a_client_watch_reports_the_daemon_gone_and_an_untrusted_one_counts_as_gone() {
        let start = Instant::now();
        let mut watch = DaemonWatch::new(true);
        assert_eq!(watch.poll(at(start, 0), |_| running(7, None)), None);
        let untrusted = |_| Seen::only(Daemon::Untrusted("x".into()));
        assert_eq!(watch.poll(at(start, 1), untrusted), None);
        let absent = |_| Seen::only(Daemon::Absent);
        assert_eq!(watch.poll(at(start, 2), absent), Some(Change::Stopped));
    }

    #[test]
    fn a_client_leaves_at_the_first_look_that_finds_a_quit() {
        let start = Instant::now();
        let mut watch = DaemonWatch::new(true);
        assert_eq!(watch.poll(at(start, 0), |_| running(7, Some(8))), None);
        let quitting = |_| Seen {
            daemon: Daemon::Quitting,
            pid: Some(7),
            server: Some(8),
        };
        assert_eq!(
            watch.poll(at(start, 1), quitting),
            Some(Change::Quitting(7))
        );
    }

    #[test]
    fn a_client_whose_server_is_gone_starts_afresh_after_two_looks() {
        let start = Instant::now();
        let mut watch = DaemonWatch::new(true);
        // No server seen yet (its contexts still opening): nothing to lose.
        assert_eq!(watch.poll(at(start, 0), |_| running(7, None)), None);
        assert_eq!(
            watch.poll(at(start, 1), |known| {
                assert_eq!(known, None);
                running(7, Some(8))
            }),
            None
        );
        assert_eq!(watch.server(), Some(8));
        // The known server is asked after, and is gone.
        assert_eq!(
            watch.poll(at(start, 2), |known| {
                assert_eq!(known, Some(8));
                running(7, None)
            }),
            None,
            "one look"
        );
        assert_eq!(
            watch.poll(at(start, 3), |_| running(7, None)),
            Some(Change::ServerLost(7))
        );
    }

    #[test]
    fn a_client_whose_daemon_was_replaced_starts_afresh() {
        let start = Instant::now();
        let mut watch = DaemonWatch::new(true);
        assert_eq!(watch.poll(at(start, 0), |_| running(7, None)), None);
        assert_eq!(watch.poll(at(start, 1), |_| running(9, None)), None);
        assert_eq!(
            watch.poll(at(start, 2), |_| running(9, None)),
            Some(Change::Stopped)
        );
    }

    #[test]
    fn a_process_that_left_a_daemon_follows_only_another() {
        let start = Instant::now();
        let mut watch = DaemonWatch::having_left(7);
        let quitting = |_| Seen {
            daemon: Daemon::Quitting,
            pid: Some(7),
            server: None,
        };
        assert_eq!(watch.poll(at(start, 0), quitting), None);
        // Its server died twice: the same daemon runs on, and is not joined again.
        assert_eq!(watch.poll(at(start, 1), |_| running(7, None)), None);
        assert_eq!(watch.poll(at(start, 2), |_| running(7, None)), None);
        assert_eq!(
            watch.poll(at(start, 3), |_| Seen::only(Daemon::Absent)),
            None
        );
        assert_eq!(watch.poll(at(start, 4), |_| running(11, None)), None);
        assert_eq!(
            watch.poll(at(start, 5), |_| running(11, None)),
            Some(Change::Started)
        );
        // A process that is no client never joins a daemon that is quitting.
        let mut watch = DaemonWatch::new(false);
        for s in 0..5 {
            assert_eq!(watch.poll(at(start, s), quitting), None);
        }
    }
}
