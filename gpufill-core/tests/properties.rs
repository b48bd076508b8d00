//! Property tests: arbitrary measurements, targets and settings never make a
//! controller or the fill loop panic or ask for a duty outside `[0, max_duty]`, and a
//! foreign process always means an idle load in `presence` mode: listed (the host's PID
//! view) or, inside a PID namespace of our own, seen only by device memory. These run
//! 256 cases (milliseconds each in a debug build). Cheap ones run 2048 cases: any
//! number makes a time or a unit without a panic, any text a time of day or an error,
//! backoff stays in bounds, the rate limiter loses no occurrence, and a reopened load
//! source waits as long as it announced.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::{
    Backoff, BesideLive, Controller, ControllerKind, DeviceError, Duty, ErrorKind, FillLoop,
    FillSettings, Load, LoadSource, Probe, ProcessInfo, RateLimiter, Shaping, SmShaping, State,
    Time, TimeOfDay, Unlisted, Utilization, Width, YieldMode, YieldPolicy, YieldSettings,
};
use gpufill_core::{ReopenError, Reopening};
use proptest::prelude::*;

/// One scripted tick of the device: a measurement (or none, or a fault) and who is there.
#[derive(Clone, Debug)]
struct Step {
    dt_ms: u64,
    sample: Option<f64>,
    fault: Option<ErrorKind>,
    foreign: bool,
    active: bool,
    load_fault: Option<ErrorKind>,
}

fn utilization() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64]
}

fn fault() -> impl Strategy<Value = Option<ErrorKind>> {
    prop_oneof![
        8 => Just(None),
        2 => Just(Some(ErrorKind::Transient)),
        1 => Just(Some(ErrorKind::Lost)),
        1 => Just(Some(ErrorKind::Unsupported)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u64), Just(10), 1..=2_000u64],
        proptest::option::of(utilization()),
        fault(),
        any::<bool>(),
        any::<bool>(),
        fault(),
    )
        .prop_map(|(dt_ms, sample, fault, foreign, active, load_fault)| Step {
            dt_ms,
            sample,
            fault,
            foreign,
            active,
            load_fault,
        })
}

#[derive(Debug, thiserror::Error)]
#[error("scripted {0:?}")]
struct Scripted(ErrorKind);

impl DeviceError for Scripted {
    fn kind(&self) -> ErrorKind {
        self.0
    }
}

struct ScriptProbe {
    now: Rc<RefCell<Step>>,
    /// Inside a PID namespace: the foreign process is never listed, memory shows it,
    /// and its samples come under a PID that is not listed.
    namespace: bool,
}

impl Probe for ScriptProbe {
    type Error = Scripted;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Scripted> {
        let s = self.now.borrow();
        match s.fault {
            Some(kind) => Err(Scripted(kind)),
            None => Ok(s.sample.map(Utilization::saturating_from_fraction)),
        }
    }
    fn foreign_processes(&mut self, _: Time) -> Result<Vec<ProcessInfo>, Scripted> {
        let s = self.now.borrow();
        Ok(if s.foreign && !self.namespace {
            vec![ProcessInfo {
                pid: 42,
                ..ProcessInfo::default()
            }]
        } else {
            Vec::new()
        })
    }
    fn active_processes(&mut self, _: Time) -> Result<Option<Vec<u32>>, Scripted> {
        let s = self.now.borrow();
        Ok(Some(if s.active { vec![42] } else { Vec::new() }))
    }
    fn unlisted(&mut self, _: Time) -> Result<Unlisted, Scripted> {
        let s = self.now.borrow();
        Ok(match (self.namespace, s.foreign) {
            (false, _) => Unlisted::ListComplete,
            (true, true) => Unlisted::Memory(600 << 20),
            (true, false) => Unlisted::Explained,
        })
    }
}

struct RecordingLoad {
    now: Rc<RefCell<Step>>,
    applied: Rc<RefCell<Vec<Load>>>,
    in_force: Load,
    /// The load in force at each `launch_due`.
    launched: Rc<RefCell<Vec<Load>>>,
}

impl LoadSource for RecordingLoad {
    type Error = Scripted;
    fn set_load(&mut self, _: Time, load: Load) -> Result<(), Scripted> {
        self.applied.borrow_mut().push(load);
        match self.now.borrow().load_fault {
            Some(kind) => Err(Scripted(kind)),
            None => {
                self.in_force = load;
                Ok(())
            }
        }
    }
    fn launch_due(&mut self, _: Time) -> Result<(), Scripted> {
        self.launched.borrow_mut().push(self.in_force);
        Ok(())
    }
}

fn mode() -> impl Strategy<Value = YieldMode> {
    prop_oneof![
        Just(YieldMode::Presence),
        Just(YieldMode::Mps),
        (0..100_000u64).prop_map(|ms| YieldMode::Activity {
            idle_grace: Duration::from_millis(ms)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn controllers_stay_within_zero_and_one(
        pi in any::<bool>(),
        targets in proptest::collection::vec(utilization(), 1..4),
        readings in proptest::collection::vec((proptest::option::of(utilization()), 0..5_000u64, any::<bool>()), 0..400),
    ) {
        let mut c: Box<dyn Controller + Send> =
            if pi { ControllerKind::Pi.build() } else { ControllerKind::Window.build() };
        let mut now = Time::ZERO;
        for (i, (measured, dt_ms, reset)) in readings.into_iter().enumerate() {
            now += Duration::from_millis(dt_ms);
            if reset {
                c.reset(now);
            }
            let target = Utilization::saturating_from_fraction(targets[i % targets.len()]);
            let duty = c.update(now, measured.map(Utilization::saturating_from_fraction), target);
            prop_assert!((0.0..=1.0).contains(&duty.fraction()), "{duty:?}");
        }
    }

    #[test]
    fn the_loop_never_exceeds_max_duty_and_idles_for_a_foreign_process(
        namespace in any::<bool>(),
        target in utilization(),
        max_duty in utilization(),
        width in 1..=65_535u32,
        fault_hold_ms in 0..5_000u64,
        grace_ms in 0..10_000u64,
        mode in mode(),
        pi in any::<bool>(),
        gaps in any::<bool>(),
        sm_count in proptest::option::of(1..=200u32),
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let settings = FillSettings {
            target: Utilization::saturating_from_fraction(target),
            width: Width::blocks(width).unwrap(),
            shaping: sm_count.map_or(Shaping::Fixed, |n| Shaping::Sm(SmShaping::new(n))),
            max_duty: Duty::clamped(max_duty),
            fault_hold: Duration::from_millis(fault_hold_ms),
            release_after: None,
            max_cost: 0.02,
        };
        let yielding = YieldSettings {
            mode,
            grace: Duration::from_millis(grace_ms),
            beside_live: if gaps { BesideLive::FillGaps } else { BesideLive::HoldOff },
            ..YieldSettings::default()
        };
        let kind = if pi { ControllerKind::Pi } else { ControllerKind::Window };
        let now_step = Rc::new(RefCell::new(steps[0].clone()));
        let applied = Rc::new(RefCell::new(Vec::new()));
        let probe = ScriptProbe { now: Rc::clone(&now_step), namespace };
        let launched = Rc::new(RefCell::new(Vec::new()));
        let load = RecordingLoad {
            now: Rc::clone(&now_step),
            applied: Rc::clone(&applied),
            in_force: Load::IDLE,
            launched: Rc::clone(&launched),
        };
        let mut fill = FillLoop::new(probe, load, kind.build(), YieldPolicy::new(yielding), settings);
        let mut now = Time::ZERO;
        for s in steps {
            now += Duration::from_millis(s.dt_ms);
            *now_step.borrow_mut() = s.clone();
            let launches_before = launched.borrow().len();
            let tick = fill.step(now);
            let launches: Vec<Load> = launched.borrow()[launches_before..].to_vec();
            // A stopped loop launches nothing; any other step lets the source launch once,
            // with the load the tick reports.
            if tick.state == State::Stopped {
                prop_assert!(launches.is_empty(), "{tick:?}: {launches:?}");
            } else {
                prop_assert_eq!(launches.len(), 1, "{:?}", tick);
                prop_assert_eq!(launches[0].duty, tick.duty);
            }
            prop_assert!(tick.duty.fraction() <= settings.max_duty.fraction() + 1e-12, "{tick:?}");
            prop_assert!((0.0..=1.0).contains(&tick.duty.fraction()));
            // A transient failure to apply the idle load keeps the old one for a tick
            // (it is retried next tick): the property holds whenever the load applies.
            if s.foreign && mode == YieldMode::Presence && s.fault.is_none() && s.load_fault.is_none() {
                prop_assert!(tick.duty.is_zero(), "{tick:?}");
                prop_assert!(launches.iter().all(|l| l.is_idle()), "{launches:?}");
            }
        }
        for l in applied.borrow().iter() {
            prop_assert!(l.duty.fraction() <= settings.max_duty.fraction() + 1e-12);
        }
    }
}

/// Any f64, with the edge values drawn often.
fn any_seconds() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(u64::MAX as f64),
        -1e3..1e3f64,
        1e15..1e25f64,
    ]
}

/// A scripted call on a [`Reopening`] source.
#[derive(Clone, Copy, Debug)]
enum Call {
    SetLoad(bool),
    Launch,
    Release,
}

fn reopen_call() -> impl Strategy<Value = (u64, Call, Option<ErrorKind>)> {
    let call = prop_oneof![
        1 => any::<bool>().prop_map(Call::SetLoad),
        4 => Just(Call::Launch),
        1 => Just(Call::Release),
    ];
    (
        prop_oneof![Just(0u64), 1..=200u64, 1..=120_000u64],
        call,
        fault(),
    )
}

/// A source that fails as scripted; counts opens.
struct ScriptedSource {
    fails: Rc<RefCell<Option<ErrorKind>>>,
}

impl LoadSource for ScriptedSource {
    type Error = Scripted;
    fn set_load(&mut self, _: Time, _: Load) -> Result<(), Scripted> {
        self.fails.borrow().map_or(Ok(()), |k| Err(Scripted(k)))
    }
    fn launch_due(&mut self, _: Time) -> Result<(), Scripted> {
        self.fails.borrow().map_or(Ok(()), |k| Err(Scripted(k)))
    }
}

// Cheap properties (well under a millisecond a case in a debug build): many cases.
proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_seconds_make_a_time_and_the_strict_conversion_agrees(a in any_seconds(), b in any_seconds()) {
        let t = Time::from_secs_f64(a);
        match Time::try_from_secs_f64(a) {
            Ok(strict) => prop_assert_eq!(strict, t),
            Err(_) => prop_assert!(t == Time::ZERO || t == Time::MAX, "{a} -> {t:?}"),
        }
        if !a.is_nan() && !b.is_nan() && a <= b {
            prop_assert!(t <= Time::from_secs_f64(b));
        }
        // Arithmetic on any of them saturates instead of overflowing.
        let later = t + Time::from_secs_f64(b).since_epoch();
        prop_assert!(later >= t && later - t <= Time::from_secs_f64(b).since_epoch());
    }

    #[test]
    fn units_take_any_number(x in any_seconds(), blocks in any::<u32>()) {
        let in_range = (0.0..=100.0).contains(&x);
        prop_assert_eq!(Utilization::from_percent(x).is_ok(), in_range);
        prop_assert_eq!(Duty::from_percent(x).is_ok(), in_range);
        prop_assert!((0.0..=1.0).contains(&Utilization::saturating_from_fraction(x).fraction()));
        prop_assert!((0.0..=1.0).contains(&Duty::clamped(x).fraction()));
        prop_assert_eq!(Width::blocks(blocks).map(Width::get), (blocks > 0).then_some(blocks));
    }

    #[test]
    fn any_text_is_a_time_of_day_or_an_error_and_times_round_trip(
        text in prop_oneof!["\\PC{0,8}", "[0-9:]{0,6}", "[0-2][0-9]:[0-6][0-9]"],
    ) {
        if let Ok(t) = TimeOfDay::parse(&text) {
            prop_assert_eq!(t.to_string(), text);
            prop_assert!(t.minutes() < 24 * 60);
        }
    }

    #[test]
    fn backoff_delays_grow_within_their_bounds(
        initial_ms in 0..100_000u64,
        max_ms in 0..10_000_000u64,
        reset_at in 0..70usize,
    ) {
        let mut b = Backoff::new(Duration::from_millis(initial_ms), Duration::from_millis(max_ms));
        let floor = Duration::from_millis(initial_ms.max(1));
        let cap = Duration::from_millis(max_ms).max(floor);
        let mut last = Duration::ZERO;
        for i in 0..70 {
            if i == reset_at {
                b.reset();
                last = Duration::ZERO;
            }
            let d = b.next_delay();
            prop_assert!(d >= floor && d <= cap && d >= last, "{d:?} after {last:?}");
            last = d;
        }
    }

    #[test]
    fn the_rate_limiter_accounts_for_every_occurrence(
        events in proptest::collection::vec((0..200_000u64, any::<bool>()), 0..300),
    ) {
        let mut limiter = RateLimiter::per_minute();
        let (mut now, mut occurred, mut logged, mut summarised) = (Time::ZERO, 0u64, 0u64, 0u64);
        for (dt_ms, hit) in events {
            now += Duration::from_millis(dt_ms);
            summarised += limiter.summary(now).unwrap_or(0);
            if hit {
                occurred += 1;
                logged += u64::from(limiter.hit(now));
            }
        }
        prop_assert_eq!(occurred, logged + summarised + limiter.held_back());
    }
}

// A few milliseconds a case (the script's generation dominates).
proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn reopening_never_opens_before_the_delay_it_announced(
        calls in proptest::collection::vec(reopen_call(), 1..60),
    ) {
        let fails = Rc::new(RefCell::new(None));
        let opens = Rc::new(RefCell::new(Vec::<Time>::new()));
        let now_cell = Rc::new(RefCell::new(Time::ZERO));
        let first = ScriptedSource { fails: Rc::clone(&fails) };
        let open = {
            let (fails, opens, now_cell) = (Rc::clone(&fails), Rc::clone(&opens), Rc::clone(&now_cell));
            move || {
                opens.borrow_mut().push(*now_cell.borrow());
                Ok(ScriptedSource { fails: Rc::clone(&fails) })
            }
        };
        let mut source = Reopening::new(first, open);
        let mut now = Time::ZERO;
        let mut not_before = Time::ZERO;
        let busy = Load { duty: Duty::FULL, width: Width::ONE_WARP };
        for (dt_ms, call, fault) in calls {
            now += Duration::from_millis(dt_ms);
            *now_cell.borrow_mut() = now;
            *fails.borrow_mut() = fault;
            let opened = opens.borrow().len();
            let result = match call {
                Call::SetLoad(idle) => source.set_load(now, if idle { Load::IDLE } else { busy }),
                Call::Launch => source.launch_due(now),
                Call::Release => source.release(now),
            };
            if opens.borrow().len() > opened {
                prop_assert!(now >= not_before, "opened at {now:?}, announced {not_before:?}");
            }
            match &result {
                // A source lost for good is reported, never passed off as success,
                // and replaced no earlier than announced.
                Err(ReopenError::Broken { retry_in, .. }) => {
                    prop_assert!(*retry_in >= Duration::from_millis(100));
                    not_before = now + *retry_in;
                }
                Err(e @ ReopenError::Waiting { .. }) => {
                    prop_assert_eq!(e.kind(), ErrorKind::Transient);
                }
                _ => {}
            }
        }
    }
}
