//! The Prometheus endpoint: per-GPU snapshots that the workers publish and a small HTTP
//! server that only reads them.
//!
//! A worker owns a [`Publisher`]: it counts events and copies its latest values into a
//! shared [`GpuSnapshot`] with `try_lock`, so a scrape in progress never makes a fill
//! loop wait (that tick's copy is skipped; counters live in the publisher, so nothing
//! is lost). The server ([`server`]) locks each snapshot only long enough to clone it,
//! then renders ([`render`]) outside any lock.

pub mod render;
pub mod server;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use gpufill_core::{Event, State, Tick};
use tracing::info;

/// The labels dcgm-exporter puts on per-GPU series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuLabels {
    /// NVML index (`gpu`).
    pub index: u32,
    /// UUID (`UUID`).
    pub uuid: String,
    /// Product name (`modelName`).
    pub model: String,
}

/// What is known of one GPU's loop, as last published.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSnapshot {
    /// Which GPU.
    pub labels: GpuLabels,
    /// Target, percent.
    pub target_percent: f64,
    /// Last measured value of the controlled metric, percent; `None` when unknown.
    pub util_percent: Option<f64>,
    /// Whether that metric is GPM SM activity (`metric = "sm"`) rather than NVML
    /// utilization: it is then published as `gpufill_sm_activity_percent`.
    pub sm_metric: bool,
    /// Our own time share, 0 to 1.
    pub duty_ratio: f64,
    /// Blocks per kernel.
    pub width_blocks: u32,
    /// The loop's state; `None` before the first tick.
    pub state: Option<State>,
    /// Foreign processes that cause a yield now.
    pub foreign: usize,
    /// `Yielded` events so far.
    pub yields_total: u64,
    /// Probe faults so far.
    pub probe_faults_total: u64,
    /// gpufill's own GPU memory, bytes, when known.
    pub memory_used_bytes: Option<u64>,
    /// Board power, watts, when known.
    pub power_watts: Option<f64>,
}

impl GpuSnapshot {
    fn new(labels: GpuLabels) -> Self {
        GpuSnapshot {
            labels,
            target_percent: f64::NAN,
            util_percent: None,
            sm_metric: false,
            duty_ratio: 0.0,
            width_blocks: 0,
            state: None,
            foreign: 0,
            yields_total: 0,
            probe_faults_total: 0,
            memory_used_bytes: None,
            power_watts: None,
        }
    }
}

/// Every GPU's shared snapshot, for the server to read.
#[derive(Debug)]
pub struct Registry {
    gpus: Vec<Arc<Mutex<GpuSnapshot>>>,
}

impl Registry {
    /// A registry for these GPUs, and one publisher per GPU (in the same order).
    pub fn new(gpus: Vec<GpuLabels>) -> (Arc<Registry>, Vec<Publisher>) {
        let shared: Vec<_> = gpus
            .into_iter()
            .map(|labels| Arc::new(Mutex::new(GpuSnapshot::new(labels))))
            .collect();
        let publishers = shared
            .iter()
            .map(|s| Publisher {
                local: s.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                shared: Arc::clone(s),
            })
            .collect();
        (Arc::new(Registry { gpus: shared }), publishers)
    }

    /// A copy of every snapshot, each lock held only to clone.
    pub fn snapshots(&self) -> Vec<GpuSnapshot> {
        self.gpus
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }

    /// The exposition text of every series.
    pub fn render(&self) -> String {
        render::render(&self.snapshots(), env!("CARGO_PKG_VERSION"))
    }
}

/// Starts the endpoint for `gpus` when `addr` is set and logs the address it bound
/// (`metrics listening on http://IP:PORT/metrics`). Returns one publisher per GPU, in
/// order, or `None`s when there is no endpoint.
///
/// # Errors
/// When the address cannot be bound (in use, not of this host).
pub fn start_endpoint(
    addr: Option<SocketAddr>,
    gpus: Vec<GpuLabels>,
) -> anyhow::Result<Vec<Option<Publisher>>> {
    let Some(addr) = addr else {
        return Ok(gpus.iter().map(|_| None).collect());
    };
    let (registry, publishers) = Registry::new(gpus);
    let bound =
        server::start(addr, registry).with_context(|| format!("cannot serve metrics on {addr}"))?;
    info!("metrics listening on http://{bound}/metrics");
    Ok(publishers.into_iter().map(Some).collect())
}

/// One worker's side: counts events and publishes without waiting.
#[derive(Debug)]
pub struct Publisher {
    local: GpuSnapshot,
    shared: Arc<Mutex<GpuSnapshot>>,
}

impl Publisher {
    /// Says whether the loop measures SM activity (`metric = "sm"`) rather than
    /// utilization, so the reading is published under its own name.
    pub fn measuring_sm_activity(mut self, sm: bool) -> Self {
        self.local.sm_metric = sm;
        self.publish();
        self
    }

    /// Takes in one tick (and the width in force), then publishes.
    pub fn observe(&mut self, tick: &Tick, width_blocks: u32) {
        let s = &mut self.local;
        s.target_percent = tick.target.percent();
        s.util_percent = tick.util.map(|u| u.percent());
        s.duty_ratio = tick.duty.fraction();
        s.width_blocks = width_blocks;
        s.state = Some(tick.state);
        s.foreign = tick.foreign;
        for event in &tick.events {
            match event {
                Event::Yielded { .. } => s.yields_total += 1,
                Event::ProbeFault { .. } => s.probe_faults_total += 1,
                _ => {}
            }
        }
        self.publish();
    }

    /// Sets the slowly refreshed device readings (memory, power), then publishes.
    pub fn set_device(&mut self, memory_used_bytes: Option<u64>, power_watts: Option<f64>) {
        self.local.memory_used_bytes = memory_used_bytes;
        self.local.power_watts = power_watts;
        self.publish();
    }

    /// What this publisher holds (published or not yet).
    pub fn local(&self) -> &GpuSnapshot {
        &self.local
    }

    fn publish(&mut self) {
        // Never wait for a scrape: if the server holds the lock, the next tick publishes.
        match self.shared.try_lock() {
            Ok(mut shared) => shared.clone_from(&self.local),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().clone_from(&self.local),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_core::{Duty, Time, Utilization};

    fn labels() -> GpuLabels {
        GpuLabels {
            index: 0,
            uuid: "GPU-0".into(),
            model: "sim".into(),
        }
    }

    fn tick(state: State, events: Vec<Event>) -> Tick {
        Tick {
            at: Time::ZERO,
            state,
            target: Utilization::from_percent(50.0).unwrap(),
            sample: None,
            util: Some(Utilization::from_percent(48.0).unwrap()),
            duty: Duty::clamped(0.5),
            width: gpufill_core::Width::ONE_WARP,
            foreign: 0,
            events,
        }
    }

    #[test]
    fn a_publisher_counts_yields_and_faults_and_publishes_them() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        let p = &mut publishers[0];
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![7],
                    unlisted: false,
                }],
            ),
            1,
        );
        p.observe(&tick(State::Yielding, vec![]), 1);
        let fault = Event::ProbeFault {
            message: "x".into(),
        };
        p.observe(&tick(State::Filling, vec![fault, Event::Filling]), 4);
        let s = &registry.snapshots()[0];
        assert_eq!((s.yields_total, s.probe_faults_total), (1, 1));
        assert_eq!(s.state, Some(State::Filling));
        assert_eq!((s.width_blocks, s.duty_ratio), (4, 0.5));
        assert_eq!(s.util_percent, Some(48.0));
    }

    #[test]
    fn a_held_lock_never_blocks_a_publisher_and_nothing_is_lost() {
        let (registry, mut publishers) = Registry::new(vec![labels()]);
        let p = &mut publishers[0];
        let held = registry.gpus[0].lock().unwrap();
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![],
                    unlisted: false,
                }],
            ),
            1,
        );
        assert_eq!(held.yields_total, 0, "not published while the lock is held");
        drop(held);
        p.observe(
            &tick(
                State::Yielding,
                vec![Event::Yielded {
                    pids: vec![],
                    unlisted: false,
                }],
            ),
            1,
        );
        assert_eq!(registry.snapshots()[0].yields_total, 2);
    }
}
