//! How often the fill loop reads the process list: every tick while filling (a newcomer
//! must be seen before its first kernel), every `YIELDING_POLL` while yielding.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::fill::YIELDING_POLL;
use gpufill_core::{
    ControllerKind, FillLoop, FillSettings, Load, LoadSource, Probe, ProcessInfo, State, Time,
    Utilization, YieldPolicy, YieldSettings,
};

/// One foreign process listed from 1 s to 3 s; records when the list was read.
struct CountingProbe {
    reads: Rc<RefCell<Vec<Time>>>,
}

impl Probe for CountingProbe {
    type Error = Infallible;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Infallible> {
        Ok(Some(Utilization::saturating_from_fraction(0.5)))
    }
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Infallible> {
        self.reads.borrow_mut().push(now);
        let listed = now >= Time::from_secs_f64(1.0) && now < Time::from_secs_f64(3.0);
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

struct NoLoad;

impl LoadSource for NoLoad {
    type Error = Infallible;
    fn set_load(&mut self, _: Time, _: Load) -> Result<(), Infallible> {
        Ok(())
    }
}

#[test]
fn the_list_is_read_every_tick_while_filling_and_every_100_ms_while_yielding() {
    let reads = Rc::new(RefCell::new(Vec::new()));
    let probe = CountingProbe {
        reads: Rc::clone(&reads),
    };
    let settings = YieldSettings {
        grace: Duration::from_secs(1),
        ..YieldSettings::default()
    };
    let mut fill = FillLoop::new(
        probe,
        NoLoad,
        ControllerKind::Pi.build(),
        YieldPolicy::new(settings),
        FillSettings::default(),
    );
    let tick = Duration::from_millis(10);
    let mut states = Vec::new();
    let mut now = Time::ZERO;
    while now < Time::from_secs_f64(6.0) {
        states.push((now, fill.step(now).state));
        now += tick;
    }
    let reads = reads.borrow();
    let between = |from: f64, to: f64| {
        reads
            .iter()
            .filter(|t| **t >= Time::from_secs_f64(from) && **t < Time::from_secs_f64(to))
            .count()
    };
    // Filling before the newcomer: every tick, so it is seen in the tick it appears.
    assert_eq!(between(0.0, 1.0), 100);
    let first_yield = states.iter().find(|(_, s)| *s == State::Yielding).unwrap();
    assert_eq!(first_yield.0, Time::from_secs_f64(1.0));
    // Yielding (1 s to the end of the grace at 4 s): one read per 100 ms, 28 in 2.8 s.
    assert!(between(1.1, 3.9) <= 28 + 1, "{} reads", between(1.1, 3.9));
    assert!(between(1.1, 3.9) >= 28 - 1, "{} reads", between(1.1, 3.9));
    // Back to filling at most one poll after the grace ends (3 s + 1 s).
    let resumed = states
        .iter()
        .find(|(t, s)| *t > Time::from_secs_f64(3.0) && *s == State::Filling)
        .unwrap();
    assert!(resumed.0 >= Time::from_secs_f64(4.0), "{resumed:?}");
    assert!(
        resumed.0 <= Time::from_secs_f64(4.0) + YIELDING_POLL,
        "{resumed:?}"
    );
    assert_eq!(between(4.5, 5.5), 100);
}
