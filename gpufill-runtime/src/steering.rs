//! What a worker does around each step of its fill loop ([`Steering`]): take in new
//! settings, set the scheduled target (the local time of day comes from here), and
//! publish a snapshot. Shared by the [`crate::Agent`]'s workers and by anything that
//! drives a loop itself (`gpufill simulate` in virtual time).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use gpufill_core::{
    ControllerKind, LoadSource, Loop, Probe, Schedule, Tick, Time, TimeOfDay, Utilization,
};
use tracing::{debug, info};

use crate::settings::Settings;
use crate::snapshot::Publisher;

/// Where the time of day comes from.
#[derive(Clone, Copy, Debug)]
pub enum DayClock {
    /// The host's local time (read at most once a second).
    Local,
    /// Virtual: this time of day at loop time zero (`simulate --start-time`).
    StartingAt(TimeOfDay),
}

/// Device readings for metrics (own memory, board power), refreshed at most once a second.
pub type DeviceReadings = (Option<u64>, Option<f64>);

const SLOW_REFRESH: Duration = Duration::from_secs(1);

/// The per-tick extras of one worker: what an [`crate::Agent`]'s worker does around each
/// step, for a caller that drives a fill loop itself.
///
/// ```
/// use gpufill_sim::{SimConfig, SimGpu};
/// use gpufill_core::{FillLoop, Time, TimeOfDay};
/// use gpufill_runtime::{DayClock, Settings, Steering};
///
/// let settings = Settings { target_percent: 30.0, ..Settings::default() };
/// let gpu = SimGpu::new(SimConfig::default());
/// let mut fill = FillLoop::build(gpu.probe(), gpu.load(), &settings.loop_settings(132, false));
/// let midnight = DayClock::StartingAt(TimeOfDay::MIDNIGHT);
/// let mut steering = Steering::new(&settings, false, midnight);
/// let tick = steering.step(&mut fill, Time::ZERO, |_| (None, None));
/// assert_eq!(tick.target.percent(), 30.0);
/// ```
pub struct Steering {
    schedule: Schedule,
    controller: ControllerKind,
    mps: bool,
    clock: DayClock,
    time_of_day: Option<(Time, Option<TimeOfDay>)>,
    updates: Option<Receiver<Arc<Settings>>>,
    publisher: Option<Publisher>,
    device_read: Option<Time>,
    scheduled: Option<Utilization>,
    reloaded: Option<Arc<Settings>>,
}

impl Steering {
    /// Extras for a loop started from `settings`; `mps` says whether an MPS daemon was
    /// found at start (it decides `yield.mps = "auto"` on updates too).
    pub fn new(settings: &Settings, mps: bool, clock: DayClock) -> Self {
        Steering {
            schedule: settings.schedule(),
            controller: settings.controller,
            mps,
            clock,
            time_of_day: None,
            updates: None,
            publisher: None,
            device_read: None,
            scheduled: None,
            reloaded: None,
        }
    }

    /// The settings of the last update applied, if any: a loop opened again (after a
    /// lost GPU) is built from them.
    pub fn reloaded(&self) -> Option<Arc<Settings>> {
        self.reloaded.clone()
    }

    /// Whether an MPS daemon was found at start.
    pub fn mps(&self) -> bool {
        self.mps
    }

    /// Says whether this loop's process is an MPS client now: a simulated run that
    /// leaves its daemon goes on without MPS, as `gpufill run` does after restarting.
    pub fn set_mps(&mut self, mps: bool) {
        self.mps = mps;
    }

    /// Takes new settings from `updates` at each tick (the newest, if several wait).
    pub fn with_updates(mut self, updates: Receiver<Arc<Settings>>) -> Self {
        self.updates = Some(updates);
        self
    }

    /// Publishes each tick to `publisher`.
    pub fn with_publisher(mut self, publisher: Option<Publisher>) -> Self {
        self.publisher = publisher;
        self
    }

    /// Applies new settings to `fill`: settings, yield policy, schedule, and the
    /// controller if its kind changed (else it keeps its state). Keys that need a
    /// restart are not looked at ([`Settings::live_update`] keeps them).
    pub fn apply<P: Probe, L: LoadSource>(&mut self, fill: &mut Loop<P, L>, new: &Settings) {
        // The shaping belongs to the opened GPU (its SM count, the probe's metric, the
        // launcher's kernel): `metric` and `load.kernel` need a restart, so keep it. The
        // target is the schedule's (`set_settings` leaves it): the new schedule sets it
        // at the next step.
        let mut settings = new.fill_settings();
        settings.shaping = fill.settings().shaping;
        fill.set_settings(settings);
        fill.set_yield_settings(new.yield_settings(self.mps));
        self.schedule = new.schedule();
        if new.controller != self.controller {
            fill.set_controller(new.controller.build());
            self.controller = new.controller;
        }
        debug!(target = new.target_percent, "new settings applied");
    }

    /// One step of `fill` at `now` with the extras around it: reloaded settings and the
    /// scheduled target before, metrics after (`device` reads memory and power, called at
    /// most once a second and only with an endpoint).
    pub fn step<P: Probe, L: LoadSource>(
        &mut self,
        fill: &mut Loop<P, L>,
        now: Time,
        device: impl FnOnce(&P) -> DeviceReadings,
    ) -> Tick {
        self.before_step(fill, now);
        let tick = fill.step(now);
        self.after_step(&tick, || device(fill.probe()));
        tick
    }

    /// Before a step at `now`: any reloaded settings, then the scheduled target.
    pub fn before_step<P: Probe, L: LoadSource>(&mut self, fill: &mut Loop<P, L>, now: Time) {
        let latest = self.updates.as_ref().and_then(|r| r.try_iter().last());
        if let Some(settings) = latest {
            self.apply(fill, &settings);
            self.reloaded = Some(settings);
        }
        let tod = self.time_of_day(now);
        let target = self.schedule.target(tod, fill.quiet_for(now));
        if target != fill.settings().target {
            fill.set_target(target);
        }
        if self.scheduled.is_some_and(|before| before != target) {
            info!(target = target.percent(), "scheduled target");
        }
        self.scheduled = Some(target);
    }

    /// After a step: publish it; `device` is called at most once a second for the
    /// slowly refreshed readings.
    pub fn after_step(&mut self, tick: &Tick, device: impl FnOnce() -> DeviceReadings) {
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        publisher.observe(tick, tick.width.get());
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
            DayClock::StartingAt(start) => Some(start.after(now.since_epoch())),
            DayClock::Local => match self.time_of_day {
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
