//! What a worker does around each step of its fill loop: take in reloaded settings,
//! set the scheduled target, and publish metrics. Shared by `run` (one per GPU thread)
//! and `simulate`.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use gpufill_core::{
    Controller, ControllerKind, FillLoop, LoadSource, Probe, Schedule, Tick, Time, TimeOfDay,
};
use tracing::info;

use crate::config::Config;
use crate::metrics::Publisher;

/// A fill loop with a boxed controller, as every worker runs it.
pub type Loop<P, L> = FillLoop<P, L, Box<dyn Controller + Send>>;

/// Where the time of day comes from.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The host's local time (read at most once a second).
    Local,
    /// Virtual: this time of day at loop time zero (`simulate --start-time`).
    StartingAt(TimeOfDay),
}

/// Device readings for metrics (own memory, board power), refreshed at most once a second.
pub type DeviceReadings = (Option<u64>, Option<f64>);

const SLOW_REFRESH: Duration = Duration::from_secs(1);

/// The per-tick extras of one worker.
pub struct Live {
    schedule: Schedule,
    controller: ControllerKind,
    mps: bool,
    clock: Clock,
    time_of_day: Option<(Time, Option<TimeOfDay>)>,
    updates: Option<Receiver<Arc<Config>>>,
    publisher: Option<Publisher>,
    device_read: Option<Time>,
}

impl Live {
    /// Extras for a loop started from `config`; `mps` says whether an MPS daemon was
    /// found at start (it decides `yield.mps = "auto"` on reloads too).
    pub fn new(config: &Config, mps: bool, clock: Clock) -> Self {
        Live {
            schedule: config.schedule(),
            controller: config.controller_kind(),
            mps,
            clock,
            time_of_day: None,
            updates: None,
            publisher: None,
            device_read: None,
        }
    }

    /// Takes reloaded settings from `updates` at each tick.
    pub fn with_updates(mut self, updates: Receiver<Arc<Config>>) -> Self {
        self.updates = Some(updates);
        self
    }

    /// Publishes each tick to `publisher`.
    pub fn with_publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.publisher = publisher;
        self
    }

    /// Applies reloaded settings to `fill`: settings, yield policy, schedule, and the
    /// controller if its kind changed (else it keeps its state).
    pub fn apply<P: Probe, L: LoadSource>(&mut self, fill: &mut Loop<P, L>, config: &Config) {
        fill.set_settings(config.fill_settings());
        fill.set_yield_settings(config.yield_settings_with(self.mps));
        self.schedule = config.schedule();
        let kind = config.controller_kind();
        if kind != self.controller {
            fill.set_controller(kind.build());
            self.controller = kind;
        }
        info!(target = config.target_percent, "new settings applied");
    }

    /// Before a step at `now`: any reloaded settings, then the scheduled target.
    pub fn before_step<P: Probe, L: LoadSource>(&mut self, fill: &mut Loop<P, L>, now: Time) {
        let latest = self.updates.as_ref().and_then(|r| r.try_iter().last());
        if let Some(config) = latest {
            self.apply(fill, &config);
        }
        let tod = self.time_of_day(now);
        let target = self.schedule.target(tod, fill.quiet_for(now));
        if target != fill.settings().target {
            fill.set_target(target);
        }
    }

    /// After a step: publish it; `device` is called at most once a second for the
    /// slowly refreshed readings.
    pub fn after_step(
        &mut self,
        tick: &Tick,
        width_blocks: u32,
        device: impl FnOnce() -> DeviceReadings,
    ) {
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        publisher.observe(tick, width_blocks);
        if self
            .device_read
            .is_none_or(|at| tick.at.saturating_since(at) >= SLOW_REFRESH)
        {
            self.device_read = Some(tick.at);
            let (memory, power) = device();
            publisher.set_device(memory, power);
        }
    }

    fn time_of_day(&mut self, now: Time) -> Option<TimeOfDay> {
        if !self.schedule.uses_time_of_day() {
            return None;
        }
        match self.clock {
            Clock::StartingAt(start) => Some(start.after(now.since_epoch())),
            Clock::Local => match self.time_of_day {
                Some((at, tod)) if now.saturating_since(at) < SLOW_REFRESH => tod,
                _ => {
                    let tod = crate::localtime::now();
                    self.time_of_day = Some((now, tod));
                    tod
                }
            },
        }
    }
}
