//! Property tests: arbitrary measurements, targets and settings never make a
//! controller or the fill loop panic or ask for a duty outside `[0, max_duty]`, and a
//! foreign process always means an idle load in `presence` mode: listed (the host's PID
//! view) or, inside a PID namespace of our own, seen only by device memory. On the
//! simulated GPU's namespace view, random jobs never meet a kernel of ours.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::{
    Controller, ControllerKind, DeviceError, Duty, ErrorKind, FillLoop, FillSettings, Load,
    LoadSource, Probe, ProcessInfo, Shaping, SmShaping, State, Time, Unlisted, Utilization, Width,
    YieldMode, YieldPolicy, YieldSettings,
};
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
        };
        let yielding = YieldSettings {
            mode,
            grace: Duration::from_millis(grace_ms),
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

/// One random job for the namespace property: when the host would list it (s), how
/// long it stays (s), its first kernel after that (ms), its load, its memory (MiB), and
/// whether it only holds its context.
#[cfg(feature = "sim")]
type JobSpec = (f64, f64, u64, f64, u64, bool);

#[cfg(feature = "sim")]
fn job() -> impl Strategy<Value = JobSpec> {
    (
        0.5..20.0f64,
        0.3..10.0f64,
        85..250u64,
        0.01..=1.0f64,
        100..3_000u64,
        any::<bool>(),
    )
}

#[cfg(feature = "sim")]
proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn inside_a_pid_namespace_presence_runs_no_kernel_beside_a_foreign_context(
        jobs in proptest::collection::vec(job(), 1..5),
        target in 0.05..=1.0f64,
    ) {
        use gpufill_core::sim::{ForeignJob, SimConfig, Simulation};
        let foreign: Vec<ForeignJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(listed, life, first_ms, load, mib, idle))| {
                let leaves = Time::from_secs_f64(listed + life);
                ForeignJob {
                    pid: 5000 + i as u32,
                    first_kernel_after: Duration::from_millis(first_ms),
                    memory_bytes: mib << 20,
                    work: idle.then_some((leaves, leaves)),
                    ..ForeignJob::compute_bound(listed, listed + life, load)
                }
            })
            .collect();
        // From its first kernel on, a job's context is complete.
        let complete: Vec<(Time, Time)> = foreign
            .iter()
            .map(|j| (j.listed_at + j.first_kernel_after, j.leaves_at))
            .collect();
        let cfg = SimConfig {
            foreign,
            // The longest burst a stop leaves running: 90 % of a 50 ms period.
            stop_tail: Duration::from_millis(45),
            ..SimConfig::default().pid_namespace()
        };
        let settings = FillSettings {
            target: Utilization::saturating_from_fraction(target),
            ..FillSettings::default()
        };
        let mut sim = Simulation::new(
            cfg,
            settings,
            YieldSettings::default(),
            ControllerKind::Pi.build(),
            Duration::from_millis(50),
        );
        let mut ticks = Vec::new();
        sim.run_until(Time::from_secs_f64(35.0), |t| ticks.push(t.clone()));
        for t in &ticks {
            prop_assert!(t.duty.fraction() <= 1.0 && t.state != State::Stopped, "{t:?}");
            let present = complete.iter().any(|&(from, to)| from <= t.at && t.at < to);
            if present {
                prop_assert!(t.duty.is_zero(), "{t:?}");
            }
        }
        let report = sim.gpu().report(Time::from_secs_f64(35.0));
        for j in &report.foreign {
            prop_assert_eq!(j.overlap, Duration::ZERO, "{:?}", report);
        }
    }
}
