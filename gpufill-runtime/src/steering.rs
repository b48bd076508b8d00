//! What a worker does around each step of its fill loop ([`Steering`]): take in new
//! settings, set the scheduled target (the local time of day comes from here), and
//! publish a snapshot. Shared by the [`crate::Agent`]'s workers and by anything that
//! drives a loop itself (`gpufill simulate` in virtual time).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use gpufill_core::{
    Controller, ControllerKind, FillLoop, LoadSource, Probe, Schedule, Tick, Time, TimeOfDay,
    Utilization,
};
use tracing::{debug, info};

use crate::settings::Settings;
use crate::snapshot::Publisher;

/// A fill loop with a boxed controller, as every worker runs it.
pub type Loop<P, L> = FillLoop<P, L, Box<dyn Controller + Send>>;

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
/// use gpufill_core::sim::{SimConfig, SimGpu};
/// use gpufill_core::{FillLoop, Time, TimeOfDay, YieldPolicy};
/// use gpufill_runtime::{DayClock, Settings, Steering};
///
/// let settings = Settings { target_percent: 30.0, ..Settings::default() };
/// let gpu = SimGpu::new(SimConfig::default());
/// let mut fill = FillLoop::new(
///     gpu.probe(),
///     gpu.load(),
///     settings.controller.build(),
///     YieldPolicy::new(settings.yield_settings(false)),
///     settings.fill_settings(),
/// );
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
        // launcher's kernel): `metric` and `load.kernel` need a restart, so keep it.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::WindowSettings;
    use crate::snapshot::{GpuLabels, Registry};
    use gpufill_core::sim::{SimConfig, SimGpu};
    use gpufill_core::{Clock, State, VirtualClock, YieldPolicy};

    /// `FillLoop::run` with `live`'s extras: ticks every `period` until `keep_going`
    /// returns false, then leaves the device idle. Returns the last tick.
    fn drive<P: Probe, L: LoadSource, K: Clock>(
        fill: &mut Loop<P, L>,
        clock: &K,
        period: Duration,
        live: &mut Steering,
        device: impl Fn(&P) -> DeviceReadings,
        mut keep_going: impl FnMut(&Tick) -> bool,
    ) -> Tick {
        let mut next = clock.now();
        loop {
            let tick = live.step(fill, clock.now(), &device);
            if tick.state == State::Stopped || !keep_going(&tick) {
                let _ = fill.idle(clock.now());
                return tick;
            }
            next = gpufill_core::time::next_tick(next, period, clock.now());
            clock.sleep_until(next);
        }
    }

    fn sim_loop(
        gpu: &SimGpu,
        config: &Settings,
    ) -> Loop<gpufill_core::sim::SimProbe, gpufill_core::sim::SimLoad> {
        FillLoop::new(
            gpu.probe(),
            gpu.load(),
            config.controller.build(),
            YieldPolicy::new(config.yield_settings(false)),
            config.fill_settings(),
        )
    }

    #[test]
    fn a_reload_keeps_the_shaping_of_the_opened_gpu() {
        let config = Settings {
            metric: crate::settings::Metric::Sm,
            ..Settings::default()
        };
        let gpu = SimGpu::new(SimConfig::default());
        let mut fill = sim_loop(&gpu, &config);
        let shaping = config.shaping(132);
        let mut settings = *fill.settings();
        settings.shaping = shaping;
        fill.set_settings(settings);
        let mut live = Steering::new(&config, false, DayClock::StartingAt(TimeOfDay::MIDNIGHT));
        let mut reloaded = config.clone();
        reloaded.target_percent = 30.0;
        live.apply(&mut fill, &reloaded);
        assert_eq!(fill.settings().shaping, shaping);
        assert_eq!(fill.settings().target.percent(), 30.0);
    }

    #[test]
    fn a_reload_sent_mid_run_applies_at_the_next_tick_and_shows_in_metrics() {
        let config = Settings::default();
        let gpu = SimGpu::new(SimConfig::default());
        let mut fill = sim_loop(&gpu, &config);
        let (tx, rx) = crossbeam_channel::unbounded();
        let (registry, mut publishers) = Registry::new(vec![GpuLabels {
            index: 0,
            uuid: "GPU-x".into(),
            model: "m".into(),
        }]);
        let mut live = Steering::new(&config, false, DayClock::StartingAt(TimeOfDay::MIDNIGHT))
            .with_updates(rx)
            .with_publisher(publishers.pop());
        let mut reloaded = config.clone();
        reloaded.target_percent = 30.0;
        reloaded.controller = gpufill_core::ControllerKind::Window;
        let mut sent_at = None;
        let mut targets = Vec::new();
        let clock = VirtualClock::default();
        let last = drive(
            &mut fill,
            &clock,
            config.tick(),
            &mut live,
            |_| (Some(1), Some(2.0)),
            |tick| {
                targets.push((tick.at, tick.target.percent()));
                if tick.at >= Time::from_secs_f64(2.0) && sent_at.is_none() {
                    tx.send(Arc::new(reloaded.clone())).unwrap();
                    sent_at = Some(tick.at);
                }
                tick.at < Time::from_secs_f64(4.0)
            },
        );
        let sent_at = sent_at.unwrap();
        for (at, target) in targets {
            let expected = if at > sent_at { 30.0 } else { 50.0 };
            assert_eq!(target, expected, "at {at:?}");
        }
        assert_eq!(last.target.percent(), 30.0);
        // A GPU reopened after a loss is built from the reloaded settings.
        assert_eq!(live.reloaded().map(|c| c.target_percent), Some(30.0));
        let snapshot = &registry.snapshots()[0];
        assert_eq!(snapshot.target_percent, 30.0);
        assert_eq!(
            (snapshot.memory_used_bytes, snapshot.power_watts),
            (Some(1), Some(2.0))
        );
        assert!(gpu.requested_load().is_idle(), "left idle");
    }

    #[test]
    fn a_window_crossed_in_virtual_time_changes_the_target() {
        let mut config = Settings::default();
        config.schedule.windows = vec![WindowSettings {
            start: TimeOfDay::parse("22:00").unwrap(),
            end: TimeOfDay::parse("06:00").unwrap(),
            target_percent: 0.0,
        }];
        let gpu = SimGpu::new(SimConfig::default());
        let mut fill = sim_loop(&gpu, &config);
        let start = TimeOfDay::parse("21:59").unwrap();
        let mut live = Steering::new(&config, false, DayClock::StartingAt(start));
        let mut ticks = Vec::new();
        let last = drive(
            &mut fill,
            &VirtualClock::default(),
            config.tick(),
            &mut live,
            |_| (None, None),
            |tick| {
                ticks.push((
                    tick.at.as_secs_f64(),
                    tick.target.percent(),
                    tick.duty.percent(),
                ));
                tick.at < Time::from_secs_f64(65.0)
            },
        );
        assert!(ticks.iter().filter(|t| t.0 < 60.0).all(|t| t.1 == 50.0));
        assert!(ticks.iter().filter(|t| t.0 >= 60.0).all(|t| t.1 == 0.0));
        // Inside the window the state says gpufill is off, not filling.
        assert_eq!(last.state, State::Off, "{last:?}");
        let (_, _, duty) = ticks.last().unwrap();
        assert!(*duty < 1.0, "off inside the window, duty {duty}");
    }
}
