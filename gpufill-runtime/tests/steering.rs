//! [`Steering`] around a fill loop on the simulated GPU, in virtual time: a reload
//! applies at the next tick, keeps the opened GPU's shaping and shows in the snapshot,
//! and a schedule window crossed changes the target. (Here, not beside the code:
//! the simulated GPU's crate depends on this one, and a unit test would see two copies
//! of its types.)

use std::sync::Arc;
use std::time::Duration;

use gpufill_core::{
    Clock, FillLoop, LoadSource, Probe, State, Tick, Time, TimeOfDay, VirtualClock,
};
use gpufill_runtime::{
    DayClock, DeviceReadings, GpuLabels, Loop, Metric, Registry, Settings, Steering, WindowSettings,
};
use gpufill_sim::{SimConfig, SimGpu, SimLoad, SimProbe};

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

fn sim_loop(gpu: &SimGpu, config: &Settings) -> Loop<SimProbe, SimLoad> {
    FillLoop::build(
        gpu.probe(),
        gpu.load(),
        &config.loop_settings(SimConfig::default().sm_count, false),
    )
}

#[test]
fn a_reload_keeps_the_shaping_of_the_opened_gpu() {
    let config = Settings {
        metric: Metric::Sm,
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
    // The target is the schedule's alone: a reload does not write it; the new
    // schedule sets it at the next step.
    assert_eq!(fill.settings().target.percent(), 50.0);
    let tick = live.step(&mut fill, Time::ZERO, |_| (None, None));
    assert_eq!(tick.target.percent(), 30.0);
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
