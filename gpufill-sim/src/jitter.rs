//! The host's own jitter in our kernels' timing ([`HostJitter`], `gpufill simulate
//! --host-jitter`), so that the rule that reads the timing ([`gpufill_core::kernel_timing`])
//! meets on a CPU what it meets on the hosts where it misjudged.
//!
//! With jitter on, every group of our kernels is timed as the CUDA launcher times it
//! (a host launch time and gap, a GPU start stamp) and judged by the same
//! [`StartChain`]; the late start a context switch causes is added to the stamp of the
//! group it delays, instead of being reported directly. Calibrated on the traces of the
//! two GPUs of one host that paused with nobody there at 052ca04
//! (docs/data/host-jitter-h100.txt;
//! docs/benchmarks.md#the-cause-the-host-stalls-the-launching-thread-and-the-baseline-took-the-stalls-in;
//! the values are [`HostJitter::H100_MEASURED`]'s):
//! - **stalls**: now and then the launching thread is stalled for a few hundred
//!   microseconds, often two launches in a row or close together: episodes of
//!   [`HostJitter::episode`] at a mean gap of [`HostJitter::episode_every`], each launch
//!   in one stalled with [`HostJitter::stall_chance`]. Most stalls fall in the kernel's
//!   launch; [`HostJitter::in_record`] of them inside the start event's record call,
//!   after its submission, so that the record returns late;
//! - **resumption**: after an idle spell of [`HostJitter::resume_after_idle`] or more
//!   the GPU starts our kernels up to [`HostJitter::resume_extra_us`] later, falling
//!   to nothing over [`HostJitter::resume_decay`];
//! - **noise**: ordinary starts and host gaps spread by [`HostJitter::noise_us`].

use std::time::Duration;

use super::rng::Rng;
use gpufill_core::kernel_timing::{OthersSign, StartChain};
use gpufill_core::time::Time;

/// How the host's jitter is simulated (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostJitter {
    /// The seed of its random draws.
    pub seed: u64,
    /// The mean gap between stall episodes.
    pub episode_every: Duration,
    /// How long a stall episode lasts.
    pub episode: Duration,
    /// The chance that a launch within an episode is stalled.
    pub stall_chance: f64,
    /// A stall's length, us: uniform in this range...
    pub stall_us: (f64, f64),
    /// ... and one in ten uniform up to this instead.
    pub long_stall_us: f64,
    /// The share of stalls that fall inside the start event's record call.
    pub in_record: f64,
    /// How long the host's record call usually takes, us.
    pub record_call_us: f64,
    /// The spread of ordinary starts and gaps, us (uniform either side).
    pub noise_us: f64,
    /// An idle spell this long or longer makes the next starts late.
    pub resume_after_idle: Duration,
    /// How late the first start after it is, us.
    pub resume_extra_us: f64,
    /// Over how long that falls to nothing.
    pub resume_decay: Duration,
}

impl HostJitter {
    /// The jitter of the host that paused (see the module docs).
    pub const H100_MEASURED: HostJitter = HostJitter {
        seed: 1,
        episode_every: Duration::from_millis(2500),
        episode: Duration::from_millis(150),
        stall_chance: 0.7,
        stall_us: (90.0, 170.0),
        long_stall_us: 500.0,
        in_record: 0.3,
        record_call_us: 6.0,
        noise_us: 6.0,
        resume_after_idle: Duration::from_millis(200),
        resume_extra_us: 40.0,
        resume_decay: Duration::from_millis(400),
    };

    /// The measured jitter with another seed.
    pub fn seeded(seed: u64) -> Self {
        HostJitter {
            seed,
            ..Self::H100_MEASURED
        }
    }
}

/// The timing of our groups under [`HostJitter`], judged as the launcher judges it.
#[derive(Clone, Debug)]
pub(super) struct Timing {
    cfg: HostJitter,
    rng: Rng,
    chain: StartChain,
    /// The current or next stall episode: `[from, until)`.
    episode: (Time, Time),
    /// Groups that started before this have been judged.
    pub(super) judged_until: Time,
    /// The previous group's GPU start stamp, us, while the chain goes on.
    last_stamp_us: Option<f64>,
    /// When our previous group ended.
    last_end: Option<Time>,
    /// When our kernels last resumed after an idle spell.
    resumed_at: Option<Time>,
    /// Groups so far, and how many of them the host stalled.
    pub(super) groups: u64,
    pub(super) stalls: u64,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Timing {
    pub(super) fn new(cfg: HostJitter) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let first = Time::from_secs_f64(rng.exponential(cfg.episode_every.as_secs_f64()));
        Timing {
            cfg,
            rng,
            chain: StartChain::new(),
            episode: (first, first + cfg.episode),
            judged_until: Time::ZERO,
            last_stamp_us: None,
            last_end: None,
            resumed_at: None,
            groups: 0,
            stalls: 0,
        }
    }

    /// Our load went idle, or a probe ran: the launcher starts a new chain next.
    pub(super) fn restart(&mut self) {
        self.last_stamp_us = None; // the next group starts a new chain
    }

    /// A group of ours that runs `[start, end)`, `switch` late after another context's
    /// work: what the launcher's judge says of it.
    pub(super) fn group(&mut self, start: Time, end: Time, switch: Duration) -> Option<OthersSign> {
        self.groups += 1;
        let idle = self.last_end.map(|e| start.saturating_since(e));
        if idle.is_none_or(|idle| idle >= self.cfg.resume_after_idle) {
            self.resumed_at = Some(start);
        }
        self.last_end = Some(end);
        let resume = self.resumed_at.map_or(0.0, |r| {
            let into =
                start.saturating_since(r).as_secs_f64() / self.cfg.resume_decay.as_secs_f64();
            self.cfg.resume_extra_us * (1.0 - into).max(0.0)
        });
        let stall = self.stall(start);
        // Inside the record call, after its submission: the record returns late. In
        // the launch: nothing the offset sees.
        let in_record = if self.rng.next_f64() < self.cfg.in_record {
            stall
        } else {
            0.0
        };
        let n = self.cfg.noise_us;
        let stamp_us = us(start.since_epoch()) + self.rng.uniform(-n, n) + resume + us(switch);
        let host = start + Duration::from_secs_f64(in_record / 1e6);
        let call = self.cfg.record_call_us + self.rng.uniform(0.0, n / 4.0) + in_record;
        let since = self.last_stamp_us.map(|last| stamp_us - last);
        self.last_stamp_us = Some(stamp_us);
        let verdict = self
            .chain
            .next(host, Duration::from_secs_f64(call / 1e6), since);
        verdict.late().then_some(OthersSign::LateStart {
            late_us: verdict.late_us,
        })
    }

    /// How long the host stalls a launch at `at`, us (0 for most).
    fn stall(&mut self, at: Time) -> f64 {
        while at >= self.episode.1 {
            let gap = self.rng.exponential(self.cfg.episode_every.as_secs_f64());
            let from = self.episode.1 + Duration::from_secs_f64(gap);
            self.episode = (from, from + self.cfg.episode);
        }
        if at < self.episode.0 || self.rng.next_f64() >= self.cfg.stall_chance {
            return 0.0;
        }
        self.stalls += 1;
        let (lo, hi) = self.cfg.stall_us;
        if self.rng.next_f64() < 0.1 {
            self.rng.uniform(hi, self.cfg.long_stall_us)
        } else {
            self.rng.uniform(lo, hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups of 25 ms every 50 ms for `secs`, nobody else.
    fn alone(secs: u32, jitter: HostJitter) -> (Timing, usize) {
        let mut t = Timing::new(jitter);
        let mut signs = 0;
        for i in 0..secs * 20 {
            let start = Time::from_millis(u64::from(i) * 50);
            signs += usize::from(
                t.group(start, start + Duration::from_millis(25), Duration::ZERO)
                    .is_some(),
            );
        }
        (t, signs)
    }

    #[test]
    fn the_measured_host_stalls_about_one_launch_a_second() {
        let (t, _) = alone(600, HostJitter::H100_MEASURED);
        let per_s = t.stalls as f64 / 600.0;
        assert!((0.6..1.4).contains(&per_s), "{per_s}");
    }

    #[test]
    fn alone_with_the_measured_jitter_no_group_shows_another_context() {
        for seed in 1..6 {
            let (_, signs) = alone(600, HostJitter::seeded(seed));
            assert_eq!(signs, 0, "seed {seed}");
        }
    }

    #[test]
    fn a_switch_still_shows_through_the_jitter() {
        let mut t = Timing::new(HostJitter::H100_MEASURED);
        let mut seen = 0;
        let mut switches = 0;
        for i in 0..12_000u32 {
            let start = Time::from_millis(u64::from(i) * 50);
            // Another context's work before every 40th group.
            let switch = if i % 40 == 39 {
                switches += 1;
                Duration::from_micros(130)
            } else {
                Duration::ZERO
            };
            let sign = t.group(start, start + Duration::from_millis(25), switch);
            seen += usize::from(sign.is_some() && !switch.is_zero());
            assert!(
                sign.is_none() || !switch.is_zero(),
                "a sign at {i} with nobody"
            );
        }
        // A stalled launch can hide a switch (it looks early by the stall): most show.
        assert!(seen * 10 >= switches * 8, "{seen} of {switches}");
    }
}
