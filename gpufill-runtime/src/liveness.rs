//! [`LivenessWatch`]: the workers' liveness as a thread that looks at their snapshots
//! every so often judges it, a pause of the whole process left out (the `gpufill`
//! binary's main loop, for systemd's watchdog and its log).

use std::time::{Duration, Instant};

use crate::snapshot::{GpuSnapshot, Liveness};

/// How much later than its poll a look may come before the process counts as paused
/// meanwhile (SIGSTOP, a debugger, a frozen cgroup): its workers could not tick either.
const PAUSED: Duration = Duration::from_secs(1);

/// The workers' liveness as a caller that looks every `poll` judges it: a pause of the
/// whole process is not a stalled worker. After SIGSTOP and SIGCONT every worker's last
/// tick is as old as the pause, though none of them stalled; such a tick is judged as
/// if the pause had not been, and a worker that then does not tick is down once its
/// stall limit has passed in the time the process ran.
#[derive(Debug)]
pub struct LivenessWatch {
    /// How often the caller looks.
    poll: Duration,
    last_look: Option<Instant>,
    /// The process's last pause: when this thread found it, and how long it was.
    pause: Option<(Instant, Duration)>,
}

impl LivenessWatch {
    /// A watch for a caller that looks every `poll`.
    pub fn new(poll: Duration) -> Self {
        LivenessWatch {
            poll,
            last_look: None,
            pause: None,
        }
    }

    /// Each GPU's liveness at `now` from its snapshot, the process's pauses left out.
    pub fn look(&mut self, now: Instant, snapshots: &[GpuSnapshot]) -> Vec<(u32, Liveness)> {
        let gap = self.last_look.map(|at| now.saturating_duration_since(at));
        if let Some(gap) = gap.filter(|gap| *gap > self.poll + PAUSED) {
            self.pause = Some((now, gap - self.poll));
        }
        self.last_look = Some(now);
        snapshots
            .iter()
            .map(|s| (s.labels.index, s.liveness(self.judged_at(s, now))))
            .collect()
    }

    /// When to judge `s`: `now`, or the pause's length earlier for a worker whose last
    /// tick (or its start, before the first) came before the pause was found.
    fn judged_at(&self, s: &GpuSnapshot, now: Instant) -> Instant {
        match self.pause {
            Some((found, pause)) if s.last_tick_at.unwrap_or(s.started) < found => {
                now.checked_sub(pause).unwrap_or(now)
            }
            _ => now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuLabels, stall_after};

    /// How often the tests look: `gpufill run`'s poll.
    const POLL: Duration = Duration::from_millis(200);

    /// A GPU's snapshot whose worker ticked last at `at` (and ticks every 50 ms).
    fn ticked_at(at: Instant) -> GpuSnapshot {
        let mut s = GpuSnapshot::new(GpuLabels {
            index: 0,
            uuid: "GPU-0".into(),
            model: "simulated GPU".into(),
        });
        s.started = at;
        s.last_tick_at = Some(at);
        s.stall_after = stall_after(Duration::from_millis(50));
        s
    }

    /// The main loop's looks from `from` to `to`, a poll apart, at a worker that last
    /// ticked at `tick`: the first that finds it down, as seconds after `from`.
    fn first_down(
        health: &mut LivenessWatch,
        tick: Instant,
        from: Instant,
        to: Duration,
    ) -> Option<f64> {
        let snapshot = [ticked_at(tick)];
        let mut at = Duration::ZERO;
        while at <= to {
            let lives = health.look(from + at, &snapshot);
            if matches!(lives[0].1, Liveness::Down(_)) {
                return Some(at.as_secs_f64());
            }
            at += POLL;
        }
        None
    }

    #[test]
    fn a_stopped_process_s_own_pause_is_not_a_stalled_worker() {
        let t0 = Instant::now();
        let mut health = LivenessWatch::new(POLL);
        // Ticking, looked at every poll; then SIGSTOP for a minute (no look, no tick).
        assert_eq!(
            first_down(&mut health, t0, t0, Duration::from_secs(1)),
            None
        );
        let woke = t0 + Duration::from_secs(61);
        let last = ticked_at(t0 + Duration::from_secs(1));
        // Judged on the clock alone, as before, it was "worker unhealthy: no tick for 60 s".
        assert!(matches!(last.liveness(woke), Liveness::Down(_)));
        let lives = health.look(woke, &[last]);
        assert_eq!(lives, [(0, Liveness::Ticking)]);
        // Back, the worker ticks again: healthy for as long as its ticks are recent.
        let tick = woke + Duration::from_millis(50);
        assert_eq!(
            first_down(&mut health, tick, woke, Duration::from_secs(5)),
            None
        );
    }

    #[test]
    fn a_worker_that_never_ticks_again_after_a_pause_is_down_once_its_limit_ran() {
        let t0 = Instant::now();
        let mut health = LivenessWatch::new(POLL);
        health.look(t0, &[ticked_at(t0)]);
        // A 60 s pause, then no tick: down after 5 s of the process running, not at once.
        let woke = t0 + Duration::from_secs(60);
        let down = first_down(&mut health, t0, woke, Duration::from_secs(20)).unwrap();
        assert!((4.5..=5.5).contains(&down), "down {down} s after the pause");
    }

    #[test]
    fn a_worker_that_stalls_while_the_process_runs_is_down_after_its_limit() {
        let t0 = Instant::now();
        let mut health = LivenessWatch::new(POLL);
        let down = first_down(&mut health, t0, t0, Duration::from_secs(20)).unwrap();
        assert!((5.0..=5.5).contains(&down), "down after {down} s");
    }
}
