//! Faults, churn and long runs on the simulated GPU, in virtual time: a lost GPU is
//! reopened with backoff while others keep tracking, a broken CUDA context is
//! replaced, hundreds of short-lived processes never meet our kernels, and a long run
//! neither drifts nor grows.

use std::time::Duration;

use gpufill_core::LoopSettings;
use gpufill_core::Reopening;
use gpufill_core::{
    Clock, Controller, ControllerKind, Event, FillLoop, FillSettings, RetrySettings, State,
    Supervisor, SupervisorEvent, Tick, Time, Utilization, VirtualClock, YieldPolicy, YieldSettings,
};
use gpufill_sim::{
    Arrivals, ForeignJob, LongRunStats, SimConfig, SimError, SimGpu, SimLoad, SimProbe, Simulation,
    tracking,
};

const TICK: Duration = Duration::from_millis(10);

fn secs(s: f64) -> Time {
    Time::from_secs_f64(s)
}

fn settings(target: f64) -> FillSettings {
    FillSettings {
        target: Utilization::from_percent(target).unwrap(),
        ..FillSettings::default()
    }
}

type SimLoop = FillLoop<SimProbe, SimLoad, Box<dyn Controller + Send>>;

fn open_loop(gpu: &SimGpu, now: Time) -> Result<SimLoop, SimError> {
    let (probe, load) = gpu.open(now)?;
    Ok(FillLoop::new(
        probe,
        load,
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings::default()),
        settings(50.0),
    ))
}

/// Steps every supervisor every tick until `until`, returning each one's ticks and
/// supervisor events.
#[allow(clippy::type_complexity)]
fn drive<F>(
    sups: &mut [Supervisor<SimProbe, SimLoad, Box<dyn Controller + Send>, F>],
    until: Time,
) -> Vec<(Vec<Tick>, Vec<(Time, SupervisorEvent)>)>
where
    F: FnMut(Time) -> Result<SimLoop, SimError>,
{
    let clock = VirtualClock::default();
    let mut out: Vec<_> = sups.iter().map(|_| (Vec::new(), Vec::new())).collect();
    while clock.now() < until {
        let now = clock.now();
        for (sup, (ticks, events)) in sups.iter_mut().zip(&mut out) {
            let step = sup.step(now);
            if let Some(e) = step.event {
                events.push((now, e));
            }
            ticks.push(step.tick);
        }
        clock.sleep_until(now + TICK);
    }
    out
}

#[test]
fn a_factory_failing_three_times_is_retried_after_1_2_and_4_s_then_fills() {
    let gpu = SimGpu::new(SimConfig {
        lost_at: Some(secs(2.0)),
        recovers_at: Some(secs(8.5)),
        ..SimConfig::default()
    });
    let first = open_loop(&gpu, Time::ZERO).unwrap();
    let mut opens = Vec::new();
    let factory = |now: Time| {
        opens.push(now);
        open_loop(&gpu, now)
    };
    let retry = RetrySettings::default();
    let mut sups = [Supervisor::new(first, factory, retry)];
    let (ticks, events) = drive(&mut sups, secs(20.0)).remove(0);
    drop(sups);
    // Lost at 2 s: dropped, then attempts at 3, 5 (failing) and 9 s (the GPU is back at 8.5).
    let at: Vec<f64> = opens.iter().map(|t| t.as_secs_f64()).collect();
    assert_eq!(at.len(), 3, "{at:?}");
    for (got, want) in at.iter().zip([3.0, 5.0, 9.0]) {
        assert!((got - want).abs() < 0.011, "{at:?}");
    }
    assert!(
        matches!(events[0].1, SupervisorEvent::Dropped { retry_in } if retry_in == Duration::from_secs(1))
    );
    assert!(matches!(
        events.last().unwrap().1,
        SupervisorEvent::Reopened { attempts: 3 }
    ));
    // Stopped and idle while lost, filling and tracking after.
    assert!(
        ticks
            .iter()
            .filter(|t| t.at >= secs(2.0) && t.at < secs(9.0))
            .all(|t| t.state == State::Stopped && t.duty.is_zero())
    );
    let t = tracking(&ticks, secs(9.0), secs(20.0), settings(50.0).target, 2.0);
    assert!(t.settle.unwrap() <= Duration::from_secs(2), "{t:?}");
    assert!(t.mean_abs_error <= 1.0, "{t:?}");
}

#[test]
fn backoff_grows_while_the_device_stays_lost_and_is_capped() {
    let gpu = SimGpu::new(SimConfig {
        lost_at: Some(secs(1.0)),
        ..SimConfig::default()
    });
    let first = open_loop(&gpu, Time::ZERO).unwrap();
    let retry = RetrySettings {
        max: Duration::from_secs(16),
        ..RetrySettings::default()
    };
    let mut sups = [Supervisor::new(first, |now| open_loop(&gpu, now), retry)];
    let (_, events) = drive(&mut sups, secs(120.0)).remove(0);
    let delays: Vec<u64> = events
        .iter()
        .map(|(_, e)| match e {
            SupervisorEvent::Dropped { retry_in }
            | SupervisorEvent::OpenFailed { retry_in, .. } => retry_in.as_secs(),
            SupervisorEvent::Reopened { .. } => panic!("the device never comes back"),
        })
        .collect();
    assert_eq!(delays[..8], [1, 2, 4, 8, 16, 16, 16, 16]);
    // 119 s lost: 1+2+4+8 = 15 s, then every 16 s: 7 more attempts at most, logged each.
    assert!(delays.len() <= 13, "{delays:?}");
}

#[test]
fn a_gpu_lost_mid_run_stops_and_recovers_while_the_other_keeps_tracking() {
    let healthy = SimGpu::new(SimConfig::default());
    let failing = SimGpu::new(SimConfig {
        lost_at: Some(secs(5.0)),
        recovers_at: Some(secs(20.0)),
        ..SimConfig::default()
    });
    let gpus = [healthy.clone(), failing.clone()];
    let mut sups: Vec<_> = gpus
        .iter()
        .map(|gpu| {
            let first = open_loop(gpu, Time::ZERO).unwrap();
            let gpu = gpu.clone();
            Supervisor::new(
                first,
                Box::new(move |now| open_loop(&gpu, now))
                    as Box<dyn FnMut(Time) -> Result<SimLoop, SimError>>,
                RetrySettings::default(),
            )
        })
        .collect();
    let mut out = drive(&mut sups, secs(60.0));
    let (bad_ticks, bad_events) = out.remove(1);
    let (good_ticks, good_events) = out.remove(0);
    // The healthy GPU never noticed.
    assert!(good_events.is_empty());
    assert!(good_ticks.iter().skip(1).all(|t| t.state == State::Filling));
    let t = tracking(
        &good_ticks,
        Time::ZERO,
        secs(60.0),
        settings(50.0).target,
        2.0,
    );
    assert!(
        t.settle.unwrap() <= Duration::from_secs(1) && t.mean_abs_error <= 1.0,
        "{t:?}"
    );
    // The failing one reported the loss, stayed idle, and came back within the backoff.
    let stop = bad_ticks
        .iter()
        .find(|t| t.state == State::Stopped)
        .unwrap();
    assert!(stop.at >= secs(5.0) && stop.at < secs(5.02));
    assert!(
        stop.events
            .iter()
            .any(|e| matches!(e, Event::Stopped { .. }))
    );
    assert!(failing.requested_load().is_idle() || failing.holds_context());
    let (back_at, _) = bad_events
        .iter()
        .find(|(_, e)| matches!(e, SupervisorEvent::Reopened { .. }))
        .unwrap();
    // Attempts at 6, 8, 12, 20 s: back at the fourth.
    assert!((back_at.as_secs_f64() - 20.0).abs() < 0.011, "{back_at:?}");
    let t = tracking(
        &bad_ticks,
        secs(21.0),
        secs(60.0),
        settings(50.0).target,
        2.0,
    );
    assert!(t.mean_abs_error <= 1.0, "{t:?}");
    let util_while_lost = failing.report(secs(60.0));
    assert!(util_while_lost.own_busy.as_secs_f64() < 5.0 * 0.5 + 40.0 * 0.5 + 0.5);
}

#[test]
fn a_broken_cuda_context_is_replaced_and_filling_goes_on() {
    let gpu = SimGpu::new(SimConfig {
        context_breaks: vec![secs(4.0), secs(9.0)],
        ..SimConfig::default()
    });
    let opened = std::cell::Cell::new(0);
    let reopen = || {
        opened.set(opened.get() + 1);
        Ok(gpu.load())
    };
    let mut fill = FillLoop::new(
        gpu.probe(),
        Reopening::new(gpu.load(), reopen),
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings::default()),
        settings(50.0),
    );
    let clock = VirtualClock::default();
    let mut ticks = Vec::new();
    while clock.now() < secs(15.0) {
        ticks.push(fill.step(clock.now()));
        clock.sleep_until(clock.now() + TICK);
    }
    assert_eq!(opened.get(), 2, "one fresh context per break");
    assert!(ticks.iter().all(|t| t.state != State::Stopped));
    let t = tracking(&ticks, secs(10.0), secs(15.0), settings(50.0).target, 2.0);
    assert!(t.mean_abs_error <= 1.0, "{t:?}");
}

#[test]
fn a_context_that_cannot_be_made_again_stops_the_loop_for_the_supervisor() {
    let gpu = SimGpu::new(SimConfig {
        context_breaks: vec![secs(3.0)],
        ..SimConfig::default()
    });
    let mut fill = FillLoop::new(
        gpu.probe(),
        Reopening::new(gpu.load(), || Err(SimError::Lost)),
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings::default()),
        settings(50.0),
    );
    let clock = VirtualClock::default();
    let last = fill.run(&clock, TICK, |t| t.at < secs(10.0));
    assert_eq!(last.state, State::Stopped);
    assert!(last.at >= secs(3.0) && last.at < secs(3.5), "{last:?}");
}

fn churn_sim(seed: u64) -> (Simulation, Arrivals) {
    let sim = Simulation::new(
        SimConfig::default(),
        &LoopSettings {
            fill: settings(50.0),
            yielding: YieldSettings::default(),
            controller: ControllerKind::Pi,
        },
        TICK,
    );
    // 500 processes in 10 minutes, each living 50 ms to 3 s.
    let life = (Duration::from_millis(50), Duration::from_secs(3));
    (sim, Arrivals::new(seed, 3000.0, life, secs(1.0)))
}

#[test]
fn five_hundred_short_lived_processes_never_meet_our_kernels() {
    for seed in [1, 2, 3] {
        let (mut sim, mut arrivals) = churn_sim(seed);
        let mut stats = LongRunStats::new(Duration::from_secs(60), Duration::from_secs(3));
        let mut yields = 0;
        let report = sim.run_with_arrivals(secs(600.0), &mut arrivals, |t| {
            stats.record(t);
            yields += t
                .events
                .iter()
                .filter(|e| matches!(e, Event::Yielded { .. }))
                .count();
            assert_ne!(t.state, State::Stopped);
        });
        assert!((400..=600).contains(&report.arrived), "{report:?}");
        assert_eq!(report.retired, report.arrived);
        assert_eq!(report.filling_while_listed, 0, "{report:?}");
        assert_eq!(report.overlap, Duration::ZERO, "{report:?}");
        assert_eq!(report.worst_slowdown, 0.0, "{report:?}");
        // Work: the load changes on new samples (one per 200 ms) and on each yield and
        // resume, not per process or per tick.
        let samples = sim.gpu().report(secs(600.0)).samples;
        assert!(
            sim.gpu().load_calls() <= samples + 2 * yields as u64 + 4,
            "{} calls",
            sim.gpu().load_calls()
        );
        // Memory: jobs are retired as they go.
        assert!(report.max_retained <= 40, "{report:?}");
        // Log volume: a yield (and a resume) per quiet gap of at least the 5 s grace,
        // whatever the number of processes.
        assert!(yields <= 600 / 5 + 1, "{yields}");
        for p in stats.periods() {
            assert!(p.events <= 2 * 60 / 5 + 2, "{p:?}");
        }
    }
}

#[test]
fn a_long_run_with_random_arrivals_neither_drifts_nor_grows() {
    // Two virtual hours in a debug build; `gpufill simulate --duration 86400` runs the
    // same code for a day (the release-build timing:
    // docs/benchmarks.md#simulations-with-many-random-jobs-and-fuzzing-gpufill-simulate-cargo-fuzz).
    let mut sim = Simulation::new(
        SimConfig::default(),
        &LoopSettings {
            fill: settings(50.0),
            yielding: YieldSettings::default(),
            controller: ControllerKind::Pi,
        },
        TICK,
    );
    let life = (Duration::from_secs(10), Duration::from_secs(300));
    let mut arrivals = Arrivals::new(11, 20.0, life, Time::ZERO);
    let mut stats = LongRunStats::new(Duration::from_secs(1800), Duration::from_secs(3));
    let report = sim.run_with_arrivals(secs(7200.0), &mut arrivals, |t| stats.record(t));
    let periods = stats.periods().to_vec();
    assert_eq!(periods.len(), 4);
    let (first, last) = (&periods[0], &periods[3]);
    assert!(first.samples > 1000 && last.samples > 1000, "{periods:?}");
    assert!(
        first.mean_abs_error <= 1.0 && last.mean_abs_error <= 1.0,
        "{periods:?}"
    );
    assert!(
        (last.mean_abs_error - first.mean_abs_error).abs() <= 0.3,
        "{periods:?}"
    );
    assert!(
        report.arrived >= 20 && report.filling_while_listed == 0,
        "{report:?}"
    );
    assert!(report.max_retained <= 10, "{report:?}");
    for p in &periods {
        assert!(p.events <= 2 * p.yielding_ticks.min(1800 / 5) + 4, "{p:?}");
    }
    // Clones of foreign jobs are not kept: the model holds only the jobs still around.
    assert!(sim.gpu().foreign_len() <= 10);
}

#[test]
fn a_simulated_week_with_a_thousand_jobs_an_hour_keeps_what_it_holds_bounded() {
    // `gpufill simulate --duration 604800 --random-foreign 1000` ran for minutes and got
    // slower by the hour
    // (docs/benchmarks-history.md#simulations-with-many-random-jobs-at-3133261-gpufill-simulate): the
    // model kept every PID it had seen working (read only by the `activity` policy), so
    // each sample cost more than the last. Here a week of the same arrivals, ticked and
    // sampled once a virtual second (the work per virtual second is what grew), must
    // keep the model's per-job state to the jobs around now.
    let mut sim = Simulation::new(
        SimConfig {
            // NVML's slowest sampling (1 s), to keep the debug-build test short.
            sample_period: Duration::from_secs(1),
            ..SimConfig::default()
        },
        &LoopSettings {
            fill: settings(50.0),
            yielding: YieldSettings::default(),
            controller: ControllerKind::Pi,
        },
        Duration::from_secs(1),
    );
    let life = (Duration::from_secs(1), Duration::from_secs(20));
    let mut arrivals = Arrivals::new(5, 1000.0, life, Time::ZERO);
    let gpu = sim.gpu().clone();
    let mut most_pending = 0;
    let report = sim.run_with_arrivals(secs(7.0 * 86_400.0), &mut arrivals, |t| {
        let pending = gpu.pending_active_len();
        most_pending = most_pending.max(pending);
        assert!(pending <= 50, "{pending} PIDs kept at {:?}", t.at);
    });
    assert!(report.arrived > 160_000, "{report:?}");
    assert_eq!(report.retired, report.arrived);
    assert!(report.max_retained <= 50, "{report:?}");
    assert!(report.max_pending_active <= 50, "{report:?}");
    assert!(most_pending > 0, "the model saw jobs working");
}

#[test]
fn a_job_added_during_a_run_is_yielded_to() {
    let (mut sim, _) = churn_sim(0);
    sim.gpu()
        .add_foreign(ForeignJob::compute_bound(2.0, 3.0, 1.0));
    let ticks = sim.collect_until(secs(4.0));
    assert!(
        ticks
            .iter()
            .filter(|t| t.at >= secs(2.0) && t.at < secs(3.0))
            .all(|t| t.state == State::Yielding)
    );
}

#[test]
fn a_loop_that_ran_healthy_for_a_minute_is_retried_after_1_s_again() {
    // The first GPU is lost at 2 s; the factory then opens a second one, which runs
    // for 97 s before it is lost too.
    let first_gpu = SimGpu::new(SimConfig {
        lost_at: Some(secs(2.0)),
        ..SimConfig::default()
    });
    let second_gpu = SimGpu::new(SimConfig {
        lost_at: Some(secs(100.0)),
        ..SimConfig::default()
    });
    let first = open_loop(&first_gpu, Time::ZERO).unwrap();
    let mut sups = [Supervisor::new(
        first,
        |now| open_loop(&second_gpu, now),
        RetrySettings::default(),
    )];
    let (_, events) = drive(&mut sups, secs(103.0)).remove(0);
    let dropped: Vec<(f64, u64)> = events
        .iter()
        .filter_map(|(at, e)| match e {
            SupervisorEvent::Dropped { retry_in } => Some((at.as_secs_f64(), retry_in.as_secs())),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 2, "{events:?}");
    assert_eq!(dropped[0].1, 1);
    // Without the reset this would be 2 s.
    assert!(
        (dropped[1].0 - 100.0).abs() < 0.011 && dropped[1].1 == 1,
        "{dropped:?}"
    );
}
