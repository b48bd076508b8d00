//! When the fill loop lets its load source launch: at every step, right after the
//! process list was read and the load applied, so a launcher driven from the loop's
//! thread never starts a burst on a stale list; and a source whose launch fails for good
//! is replaced by [`Reopening`] with the load in force, after a delay that the loop
//! reports as a fault.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::Reopening;
use gpufill_core::{
    ControllerKind, DeviceError, ErrorKind, Event, FillLoop, FillSettings, Load, LoadSource, Probe,
    ProcessInfo, State, Time, Utilization, YieldPolicy, YieldSettings,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    /// The process list was read; whether it listed a foreign process.
    Read { listed: bool },
    /// The load source was asked to launch; the load in force then.
    Launch { load: Load },
}

type Log = Rc<RefCell<Vec<(Time, Call)>>>;

struct LoggingProbe {
    log: Log,
}

fn listed_at(now: Time) -> bool {
    now >= Time::from_secs_f64(1.0) && now < Time::from_secs_f64(3.0)
}

impl Probe for LoggingProbe {
    type Error = Failure;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Failure> {
        Ok(Some(Utilization::saturating_from_fraction(0.3)))
    }
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Failure> {
        let listed = listed_at(now);
        self.log.borrow_mut().push((now, Call::Read { listed }));
        Ok(if listed {
            vec![ProcessInfo {
                pid: 42,
                ..ProcessInfo::default()
            }]
        } else {
            Vec::new()
        })
    }
}

struct LoggingLoad {
    log: Log,
    in_force: Load,
    /// Launches left before this source fails for good (`None`: never).
    fails_after: Option<u32>,
}

impl LoggingLoad {
    fn new(log: &Log) -> Self {
        LoggingLoad {
            log: Rc::clone(log),
            in_force: Load::IDLE,
            fails_after: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("scripted {0:?}")]
struct Failure(ErrorKind);

impl DeviceError for Failure {
    fn kind(&self) -> ErrorKind {
        self.0
    }
}

impl LoadSource for LoggingLoad {
    type Error = Failure;
    fn set_load(&mut self, _: Time, load: Load) -> Result<(), Failure> {
        self.in_force = load;
        Ok(())
    }
    fn launch_due(&mut self, now: Time) -> Result<(), Failure> {
        if let Some(left) = &mut self.fails_after {
            if *left == 0 {
                return Err(Failure(ErrorKind::Lost));
            }
            *left -= 1;
        }
        let load = self.in_force;
        self.log.borrow_mut().push((now, Call::Launch { load }));
        Ok(())
    }
}

fn fill_loop<L: LoadSource>(
    log: &Log,
    load: L,
) -> FillLoop<LoggingProbe, L, impl gpufill_core::Controller> {
    let settings = YieldSettings {
        grace: Duration::from_millis(500),
        ..YieldSettings::default()
    };
    FillLoop::new(
        LoggingProbe {
            log: Rc::clone(log),
        },
        load,
        ControllerKind::Pi.build(),
        YieldPolicy::new(settings),
        FillSettings::default(),
    )
}

#[test]
fn every_step_launches_once_right_after_reading_the_list_and_never_beside_a_listed_process() {
    let log: Log = Rc::default();
    let mut fill = fill_loop(&log, LoggingLoad::new(&log));
    let tick = Duration::from_millis(20);
    let mut now = Time::ZERO;
    let mut states = Vec::new();
    while now < Time::from_secs_f64(5.0) {
        states.push(fill.step(now).state);
        now += tick;
    }
    let log = log.borrow();
    let steps = states.len();
    let launches: Vec<(Time, Load)> = log
        .iter()
        .filter_map(|&(t, c)| match c {
            Call::Launch { load } => Some((t, load)),
            Call::Read { .. } => None,
        })
        .collect();
    assert_eq!(launches.len(), steps, "one launch call per step");
    let mut filled = 0;
    for (t, load) in &launches {
        // The last read before this launch is of the same step.
        let read = log
            .iter()
            .take_while(|(at, c)| at < t || matches!(c, Call::Read { .. }) && at == t)
            .filter_map(|&(at, c)| match c {
                Call::Read { listed } => Some((at, listed)),
                Call::Launch { .. } => None,
            })
            .last();
        if !load.is_idle() {
            filled += 1;
            assert_eq!(read, Some((*t, false)), "launch at {t:?} with {load:?}");
        }
        if listed_at(*t) {
            assert!(
                load.is_idle(),
                "launch at {t:?} beside a listed process: {load:?}"
            );
        }
    }
    // It did fill before and after (not a loop that never launches anything).
    assert!(filled > 100, "{filled} filling launches");
    assert!(states.contains(&State::Yielding));
}

#[test]
fn a_source_whose_launch_fails_for_good_is_replaced_and_given_the_load_in_force() {
    let log: Log = Rc::default();
    let opened = Rc::new(RefCell::new(0));
    let first = LoggingLoad {
        fails_after: Some(5),
        ..LoggingLoad::new(&log)
    };
    let reopen = {
        let (log, opened) = (Rc::clone(&log), Rc::clone(&opened));
        move || {
            *opened.borrow_mut() += 1;
            Ok(LoggingLoad::new(&log))
        }
    };
    let mut fill = fill_loop(&log, Reopening::new(first, reopen));
    let mut ticks = Vec::new();
    for ms in (0..400).step_by(20) {
        ticks.push(fill.step(Time::from_millis(ms)));
    }
    assert_eq!(*opened.borrow(), 1, "replaced once");
    // The launch at 100 ms fails; the replacement is opened 100 ms later (the first
    // delay of its backoff) and launches with the load in force in that same step.
    // The steps in between report the fault: none passes for success, nor says it
    // fills (blind, duty 0: no load of ours runs).
    for t in &ticks {
        let waiting = (100..200).contains(&t.at.since_epoch().as_millis());
        let expected = if waiting {
            State::Blind
        } else {
            State::Filling
        };
        assert_eq!(t.state, expected, "{t:?}");
        assert_eq!(t.duty == gpufill_core::Duty::ZERO, waiting, "{t:?}");
    }
    let faulted: Vec<u64> = ticks
        .iter()
        .filter(|t| {
            t.events
                .iter()
                .any(|e| matches!(e, Event::LoadFault { .. }))
        })
        .map(|t| t.at.since_epoch().as_millis() as u64)
        .collect();
    assert_eq!(faulted, [100, 120, 140, 160, 180]);
    let launches: Vec<u64> = log
        .borrow()
        .iter()
        .filter(|(_, c)| matches!(c, Call::Launch { load } if !load.is_idle()))
        .map(|(t, _)| t.since_epoch().as_millis() as u64)
        .collect();
    assert_eq!(launches.len(), ticks.len() - faulted.len());
    assert!(launches.contains(&200) && !launches.contains(&180));
}
