//! The loop beside live work with `beside_live = "fill_gaps"`: it fills in the gaps
//! shape, announces it, meters what our kernels met, and hands the load source a longer
//! hold while the estimated cost is over the bound.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::gaps::{MAX_HOLD, MIN_HOLD};
use gpufill_core::{
    BesideLive, ControllerKind, Event, FillLoop, FillSettings, GapReport, LaunchShape, Load,
    LoadSource, Probe, ProcessInfo, State, Time, Utilization, YieldMode, YieldPolicy,
    YieldSettings,
};

#[derive(Default)]
struct Gpu {
    /// The NVML sample due at the next step, if any.
    sample: Option<f64>,
    /// What our kernels met since the last step.
    report: GapReport,
    shape: LaunchShape,
    holds: Vec<Duration>,
}

type Shared = Rc<RefCell<Gpu>>;

struct OneHolder(Shared);

impl Probe for OneHolder {
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
        Ok(vec![ProcessInfo {
            pid: 5,
            ..ProcessInfo::default()
        }])
    }
    fn active_processes(&mut self, _: Time) -> Result<Option<Vec<u32>>, Infallible> {
        Ok(Some(vec![5]))
    }
}

struct GapLoad(Shared);

impl LoadSource for GapLoad {
    type Error = Infallible;
    fn set_load(&mut self, _: Time, _: Load) -> Result<(), Infallible> {
        Ok(())
    }
    fn set_shape(&mut self, shape: LaunchShape) {
        self.0.borrow_mut().shape = shape;
    }
    fn gaps_seen(&mut self) -> GapReport {
        std::mem::take(&mut self.0.borrow_mut().report)
    }
    fn set_gap_hold(&mut self, hold: Duration) {
        self.0.borrow_mut().holds.push(hold);
    }
}

fn gap_loop(
    beside_live: BesideLive,
) -> (
    Shared,
    FillLoop<OneHolder, GapLoad, Box<dyn gpufill_core::Controller + Send>>,
) {
    let gpu = Shared::default();
    let fill = FillLoop::new(
        OneHolder(Rc::clone(&gpu)),
        GapLoad(Rc::clone(&gpu)),
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings {
            mode: YieldMode::Activity {
                idle_grace: Duration::from_secs(1),
            },
            beside_live,
            ..YieldSettings::default()
        }),
        FillSettings::default(),
    );
    (gpu, fill)
}

const TICK: Duration = Duration::from_millis(10);

/// A 200 ms NVML sample beside sub-millisecond requests that all met our kernels: 4
/// meetings, the GPU at 2 %.
fn every_request_met(gpu: &Shared) {
    let mut g = gpu.borrow_mut();
    g.sample = Some(0.02);
    g.report = GapReport {
        kernels: 4,
        ours: gpufill_core::gaps::GAP_KERNEL * 4,
        met: 4,
        held_back: 0,
        ..GapReport::default()
    };
}

#[test]
fn beside_a_working_holder_it_fills_gaps_and_holds_longer_while_the_cost_is_over_the_bound() {
    let (gpu, mut fill) = gap_loop(BesideLive::FillGaps);
    let mut events = Vec::new();
    let mut now = Time::ZERO;
    // The newcomer's idle grace: yielding.
    while now < Time::from_secs_f64(1.0) {
        assert_eq!(fill.step(now).state, State::Yielding);
        now += TICK;
    }
    let tick = fill.step(now);
    assert_eq!(tick.state, State::Filling);
    assert_eq!(gpu.borrow().shape, LaunchShape::Gaps);
    assert!(tick.events.contains(&Event::FillingGaps { pids: vec![5] }));
    assert_eq!(gpu.borrow().holds, [MIN_HOLD]);
    // Sub-millisecond requests, every one met: 4 meetings per 200 ms sample with the
    // GPU at 2 %. The estimate goes over 2 %, and the hold grows.
    for i in 1..=60 {
        now += TICK;
        if i % 20 == 0 {
            every_request_met(&gpu);
        }
        let tick = fill.step(now);
        assert_eq!(tick.state, State::Filling);
        if i >= 20 {
            assert!(tick.cost.is_some_and(|c| c > 0.2), "{tick:?}");
        }
        events.extend(tick.events);
    }
    let holds = gpu.borrow().holds.clone();
    assert!(
        holds.len() >= 3 && holds.windows(2).all(|w| w[0] < w[1]),
        "{holds:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::CostBound { over: true, .. })),
        "{events:?}"
    );
    // Many more samples: the hold stops at its longest.
    for i in 1..=2000 {
        now += TICK;
        if i % 20 == 0 {
            every_request_met(&gpu);
        }
        fill.step(now);
    }
    assert_eq!(gpu.borrow().holds.last(), Some(&MAX_HOLD));
}

#[test]
fn holding_off_is_the_default_and_nothing_is_metered() {
    let (gpu, mut fill) = gap_loop(BesideLive::HoldOff);
    let mut now = Time::ZERO;
    while now < Time::from_secs_f64(5.0) {
        let tick = fill.step(now);
        assert_eq!(tick.state, State::Yielding);
        assert_eq!(tick.cost, None);
        now += TICK;
    }
    assert!(gpu.borrow().holds.is_empty());
}
