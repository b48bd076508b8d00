//! The MPS control daemon of a simulated run (`simulate --mps`), told to quit at a given
//! time: [`SimDaemon`], and [`MpsFollower`], which watches it with the runtime's own
//! [`DaemonWatch`] on the virtual clock and says when our process leaves it.
//!
//! What the model takes from the real daemon (this module's parent docs say where each
//! comes from): told to quit, it waits until its last client has gone; its
//! control log shows the quit at once, which the watch reads as [`Daemon::Quitting`] at
//! its next look. Which clients remain: ours until it leaves, and the foreign jobs
//! listed as clients ([`SimGpu::mps_clients`]).

use std::time::Instant;

use gpufill_core::time::Time;
use gpufill_sim::SimGpu;

use super::{Change, Daemon, DaemonWatch, Seen};

/// The PID the simulated daemon runs as.
const PID: u32 = 4242;

/// A simulated MPS control daemon that runs from the start and, told to quit at
/// `quit_at`, exits once no client is left.
#[derive(Clone, Debug, PartialEq)]
pub struct SimDaemon {
    quit_at: Option<Time>,
    gone_at: Option<Time>,
}

impl SimDaemon {
    /// A daemon that is told to quit at `quit_at`, if given.
    pub fn new(quit_at: Option<Time>) -> Self {
        SimDaemon {
            quit_at,
            gone_at: None,
        }
    }

    /// What a look at `now` finds, with `clients` still connected.
    pub fn seen(&mut self, now: Time, clients: usize) -> Seen {
        let told = self.quit_at.is_some_and(|at| now >= at);
        if told && clients == 0 && self.gone_at.is_none() {
            self.gone_at = Some(now);
        }
        let daemon = match (told, self.gone_at) {
            (_, Some(_)) => Daemon::Absent,
            (true, None) => Daemon::Quitting,
            (false, None) => Daemon::Running,
        };
        Seen {
            pid: (daemon != Daemon::Absent).then_some(PID),
            daemon,
            server: None,
        }
    }

    /// When it was told to quit.
    pub fn quit_at(&self) -> Option<Time> {
        self.quit_at
    }

    /// When it exited (the first look that found it without clients after the quit).
    pub fn gone_at(&self) -> Option<Time> {
        self.gone_at
    }
}

/// Our simulated process as an MPS client: it watches [`SimDaemon`] as `gpufill run`
/// watches a real one ([`DaemonWatch`], on the virtual clock) and says when to leave.
#[derive(Debug)]
pub struct MpsFollower {
    daemon: SimDaemon,
    watch: DaemonWatch,
    /// The wall-clock instant standing for virtual time zero (the watch counts in
    /// `Instant`s).
    zero: Instant,
    left_at: Option<Time>,
}

impl MpsFollower {
    /// A client of `daemon`.
    pub fn new(daemon: SimDaemon) -> Self {
        MpsFollower {
            daemon,
            watch: DaemonWatch::new(true),
            zero: Instant::now(),
            left_at: None,
        }
    }

    /// Looks at `now` (if a look is due) and says whether our process leaves the daemon
    /// now: only once, and only while it is a client. The daemon's clients are the
    /// foreign ones `gpu` lists, and ours until it has left.
    pub fn leaves_at(&mut self, gpu: &SimGpu, now: Time) -> bool {
        let ours = usize::from(self.left_at.is_none());
        let clients = gpu.mps_clients(now) + ours;
        let at = self.zero + now.since_epoch();
        let daemon = &mut self.daemon;
        let change = self.watch.poll(at, |_| daemon.seen(now, clients));
        if self.left_at.is_none() && matches!(change, Some(Change::Quitting(_))) {
            self.left_at = Some(now);
            // The daemon sees us gone at once (a restart ends our client).
            self.daemon.seen(now, gpu.mps_clients(now));
            return true;
        }
        if self.left_at.is_some() {
            // Keep the daemon's exit time as clients leave.
            self.daemon.seen(now, gpu.mps_clients(now));
        }
        false
    }

    /// When our process left the daemon.
    pub fn left_at(&self) -> Option<Time> {
        self.left_at
    }

    /// The daemon.
    pub fn daemon(&self) -> &SimDaemon {
        &self.daemon
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use gpufill_core::fill::State;
    use gpufill_sim::{ForeignJob, SimConfig, Simulation};

    #[test]
    fn a_client_leaves_a_quitting_daemon_within_two_seconds_and_it_exits_with_its_last_client() {
        // An MPS client job from 2 s to 30 s; the daemon is told to quit at 10 s.
        let settings = Settings::default();
        let cfg = SimConfig {
            mps: true,
            foreign: vec![ForeignJob::compute_bound(2.0, 30.0, 0.3)],
            ..SimConfig::default()
        };
        let mut sim = Simulation::new(cfg, &settings.loop_settings(132, true), settings.tick());
        let mut follower = MpsFollower::new(SimDaemon::new(Some(Time::from_secs_f64(10.0))));
        let mut states = Vec::new();
        while sim.now() < Time::from_secs_f64(60.0) {
            let now = sim.now();
            if follower.leaves_at(sim.gpu(), now) {
                sim.restart_without_mps(false, &settings.loop_settings(132, false));
            }
            sim.run_until(now + settings.tick(), |t| states.push((t.at, t.state)));
        }
        let state_at = |s: f64| {
            states
                .iter()
                .rev()
                .find(|(at, _)| *at <= Time::from_secs_f64(s))
                .map(|(_, st)| *st)
        };
        // A client fills beside the job; the quit is seen at the next looks.
        assert_eq!(state_at(9.0), Some(State::Filling));
        let left = follower.left_at().expect("left the daemon").as_secs_f64();
        assert!((10.0..=12.0).contains(&left), "left at {left} s");
        // Outside MPS now, beside the job (still the daemon's client): it yields.
        assert_eq!(state_at(15.0), Some(State::Yielding));
        // The daemon exits when its last client, the job, has gone; then we fill again.
        let gone = follower.daemon().gone_at().expect("exited").as_secs_f64();
        assert!((30.0..=31.5).contains(&gone), "gone at {gone} s");
        assert_eq!(state_at(59.0), Some(State::Filling));
        assert!(!sim.gpu().report(sim.now()).foreign.is_empty());
    }

    #[test]
    fn a_daemon_told_to_quit_waits_for_its_last_client() {
        let mut daemon = SimDaemon::new(Some(Time::from_secs_f64(10.0)));
        let t = Time::from_secs_f64;
        assert_eq!(daemon.seen(t(5.0), 1).daemon, Daemon::Running);
        assert_eq!(daemon.seen(t(10.0), 1).daemon, Daemon::Quitting);
        assert_eq!(
            daemon.seen(t(30.0), 1).daemon,
            Daemon::Quitting,
            "a client stays"
        );
        assert_eq!(daemon.seen(t(31.0), 0).daemon, Daemon::Absent);
        assert_eq!(daemon.gone_at(), Some(t(31.0)));
        assert_eq!(
            daemon.seen(t(32.0), 2).daemon,
            Daemon::Absent,
            "gone for good"
        );
        // Never told: it runs on.
        assert_eq!(SimDaemon::new(None).seen(t(1e6), 0).daemon, Daemon::Running);
    }
}
