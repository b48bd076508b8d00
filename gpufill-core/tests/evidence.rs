//! The loop reports the evidence the policy decided on: a pause names our kernels' sign
//! only when that sign was the evidence, and a sign is called the host's own jitter
//! ([`Event::Unexplained`]) only where the device would show anyone there.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::{
    ControllerKind, Event, FillLoop, FillSettings, Load, LoadSource, OthersSign, Probe,
    ProcessInfo, Time, Unlisted, Utilization, YieldMode, YieldPolicy, YieldSettings,
};

/// What the scripted GPU shows at the next step.
#[derive(Clone, Debug)]
struct Shown {
    listed: Vec<u32>,
    sample: Option<f64>,
    sign: Option<OthersSign>,
    unlisted: Unlisted,
}

type Script = Rc<RefCell<Shown>>;

struct ScriptedProbe(Script);

impl Probe for ScriptedProbe {
    type Error = Infallible;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Infallible> {
        Ok(self
            .0
            .borrow_mut()
            .sample
            .take()
            .map(Utilization::saturating_from_fraction))
    }
    fn foreign_processes(&mut self, _: Time) -> Result<Vec<ProcessInfo>, Infallible> {
        let listed = self.0.borrow().listed.clone();
        Ok(listed
            .into_iter()
            .map(|pid| ProcessInfo {
                pid,
                ..ProcessInfo::default()
            })
            .collect())
    }
    fn unlisted(&mut self, _: Time) -> Result<Unlisted, Infallible> {
        Ok(self.0.borrow().unlisted)
    }
}

/// A load source whose kernels show the scripted sign, and whose probes find nobody.
struct ScriptedLoad(Script);

impl LoadSource for ScriptedLoad {
    type Error = Infallible;
    fn set_load(&mut self, _: Time, _: Load) -> Result<(), Infallible> {
        Ok(())
    }
    fn others_seen(&mut self) -> Option<OthersSign> {
        self.0.borrow_mut().sign.take()
    }
    fn probe(&mut self, _: Time) -> Result<Option<bool>, Infallible> {
        Ok(Some(false))
    }
}

const LATE: OthersSign = OthersSign::LateStart { late_us: 96.0 };
const TICK: Duration = Duration::from_millis(10);

fn scripted(
    mode: YieldMode,
    ignore_pids: Vec<u32>,
) -> (
    Script,
    FillLoop<ScriptedProbe, ScriptedLoad, Box<dyn gpufill_core::Controller + Send>>,
) {
    let script = Rc::new(RefCell::new(Shown {
        listed: Vec::new(),
        sample: None,
        sign: None,
        unlisted: Unlisted::ListComplete,
    }));
    let fill = FillLoop::new(
        ScriptedProbe(Rc::clone(&script)),
        ScriptedLoad(Rc::clone(&script)),
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings {
            mode,
            ignore_pids,
            ..YieldSettings::default()
        }),
        FillSettings::default(),
    );
    (script, fill)
}

/// Steps from `from` for `n` ticks, returning every event.
fn run(
    fill: &mut FillLoop<ScriptedProbe, ScriptedLoad, Box<dyn gpufill_core::Controller + Send>>,
    from: Time,
    n: u32,
) -> Vec<Event> {
    (0..n)
        .flat_map(|i| fill.step(from + TICK * i).events)
        .collect()
}

#[test]
fn a_late_start_in_the_same_tick_as_nvml_showing_work_is_logged_as_nvmls_word() {
    let idle_grace = Duration::from_secs(1);
    let (script, mut fill) = scripted(YieldMode::Activity { idle_grace }, Vec::new());
    script.borrow_mut().listed = vec![5];
    // A quiet holder: after its idle grace a probe finds nobody, and gpufill fills
    // beside it.
    run(&mut fill, Time::ZERO, 150);
    assert!(fill.step(Time::from_secs_f64(1.5)).state.fills());
    // In one tick our kernel starts late and NVML's sample shows more than ours.
    {
        let mut shown = script.borrow_mut();
        shown.sign = Some(LATE);
        shown.sample = Some(1.0);
    }
    let events = fill.step(Time::from_secs_f64(1.51)).events;
    let paused: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Paused { .. }))
        .collect();
    assert_eq!(
        paused,
        [&Event::Paused {
            pids: vec![5],
            unlisted: false,
            sign: None,
        }],
        "{events:?}"
    );
}

#[test]
fn a_late_start_alone_is_logged_as_the_weak_sign_it_is() {
    let idle_grace = Duration::from_secs(1);
    let (script, mut fill) = scripted(YieldMode::Activity { idle_grace }, Vec::new());
    script.borrow_mut().listed = vec![5];
    run(&mut fill, Time::ZERO, 151);
    script.borrow_mut().sign = Some(LATE);
    let events = fill.step(Time::from_secs_f64(1.51)).events;
    assert!(
        events.contains(&Event::Paused {
            pids: vec![5],
            unlisted: false,
            sign: Some(LATE),
        }),
        "{events:?}"
    );
}

#[test]
fn a_sign_just_after_an_ignored_process_was_listed_is_not_called_the_hosts_jitter() {
    for (view, jitter) in [(Unlisted::Unknown, false), (Unlisted::ListComplete, true)] {
        let (script, mut fill) = scripted(YieldMode::Presence, vec![7]);
        script.borrow_mut().unlisted = view;
        // An ignored process is listed for a while, then leaves.
        script.borrow_mut().listed = vec![7];
        run(&mut fill, Time::ZERO, 10);
        script.borrow_mut().listed.clear();
        // A kernel of ours shows someone's work 50 ms later.
        script.borrow_mut().sign = Some(LATE);
        let events = run(&mut fill, Time::from_secs_f64(0.15), 1);
        let unexplained = events.contains(&Event::Unexplained { sign: LATE });
        assert_eq!(unexplained, jitter, "{view:?}: {events:?}");
        // Either way nothing pauses for it.
        assert!(!events.iter().any(|e| matches!(e, Event::Paused { .. })));
    }
}
