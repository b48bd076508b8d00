//! What the agent tests share: settings quick enough for wall-clock time, and a
//! watcher that records what every GPU's snapshot said, on the simulated GPU's clock.

#![allow(dead_code)] // each test file uses its own part

use std::time::{Duration, Instant};

use gpufill_runtime::{Agent, AgentOptions, GpuSnapshot, Settings, SimOpener, State};

/// The product's defaults, with waits short enough for a test: a newcomer is yielded to
/// for 1 s of quiet (`yield.idle_grace_s`), and for 0.5 s after it leaves.
pub fn quick(target_percent: f64) -> Settings {
    let mut settings = Settings {
        target_percent,
        ..Settings::default()
    };
    settings.yielding.idle_grace_s = 1.0;
    settings.yielding.grace_s = 0.5;
    settings
}

/// An agent over the first `gpus` simulated GPUs of `opener`, at `target_percent` with
/// the [`quick`] settings.
pub fn started(opener: &SimOpener, gpus: u32, target_percent: f64) -> Agent {
    Agent::start(
        opener.clone(),
        opener.gpus(gpus),
        quick(target_percent),
        AgentOptions::default(),
    )
    .unwrap()
}

/// Polls `f` every 10 ms until it gives a value, for at most `limit`.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One GPU's snapshots as they were read, each with the simulated GPU's time (s).
pub type Seen = Vec<(f64, GpuSnapshot)>;

/// Reads every GPU's snapshot every 20 ms until the simulated GPUs reach `until_s`;
/// the snapshots come in the order the GPUs were given, each GPU's time from
/// `opener.gpu(index)`.
pub fn watch(agent: &Agent, opener: &SimOpener, until_s: f64) -> Vec<Seen> {
    let mut seen: Vec<Seen> = Vec::new();
    let started = Instant::now();
    loop {
        let snapshots = agent.snapshots();
        seen.resize_with(snapshots.len(), Vec::new);
        let mut latest = 0.0f64;
        for (slot, s) in snapshots.into_iter().enumerate() {
            if let Some(gpu) = opener.gpu(s.labels.index) {
                let t = gpu.now().as_secs_f64();
                latest = latest.max(t);
                seen[slot].push((t, s));
            }
        }
        // A wall-clock bound too, should a worker never open its GPU.
        if latest >= until_s || started.elapsed().as_secs_f64() > until_s + 10.0 {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The snapshots of `seen` from `from_s` to `to_s`.
pub fn between(seen: &Seen, from_s: f64, to_s: f64) -> impl Iterator<Item = &GpuSnapshot> {
    seen.iter()
        .filter(move |(t, _)| *t >= from_s && *t < to_s)
        .map(|(_, s)| s)
}

/// Whether a snapshot says the GPU is filling at `target` within `points`.
pub fn holds(s: &GpuSnapshot, target: f64, points: f64) -> bool {
    s.state == Some(State::Filling) && s.util_percent.is_some_and(|u| (u - target).abs() <= points)
}

/// How much our kernels ran on simulated GPU `index` from its last step to a second
/// later, the model left to itself: after a stop, at most the burst already queued.
pub fn busy_in_the_next_second(opener: &SimOpener, index: u32) -> Duration {
    let gpu = opener.gpu(index).expect("opened");
    let now = gpu.now();
    let before = gpu.report(now).own_busy;
    let later = gpu.report(now + Duration::from_secs(1)).own_busy;
    later - before
}
