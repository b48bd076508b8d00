//! A load source that keeps failing for good (a CUDA context whose every launch fails
//! with a sticky error, though a new context opens fine): [`Reopening`] replaces it
//! with backoff, the loop reports each failure as a fault rather than success, the log
//! stays short, and filling resumes once the fault clears.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::Reopening;
use gpufill_core::{
    ControllerKind, DeviceError, Duty, ErrorKind, Event, FillLoop, FillSettings, Load, LoadSource,
    Probe, ProcessInfo, RateLimiter, State, Tick, Time, Utilization, YieldPolicy, YieldSettings,
};

const TICK: Duration = Duration::from_millis(50);

/// The fault switch and what the sources saw, shared by every source opened.
#[derive(Default)]
struct Device {
    /// While true, every launch (and, with `set_load_fails`, every non-idle load)
    /// fails for good.
    failing: Cell<bool>,
    /// Whether `set_load` fails too, not only the launch.
    set_load_fails: Cell<bool>,
    opened: Cell<u32>,
    failures: Cell<u64>,
    /// Launches that ran a non-idle load.
    launched: Cell<u64>,
}

#[derive(Debug, thiserror::Error)]
#[error("injected sticky launch error")]
struct Sticky;

impl DeviceError for Sticky {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Lost
    }
}

/// A fault-injecting load source: fails for good while its device's switch is on.
struct FaultyLoad {
    device: Rc<Device>,
    in_force: Load,
}

impl FaultyLoad {
    fn open(device: &Rc<Device>) -> Self {
        device.opened.set(device.opened.get() + 1);
        FaultyLoad {
            device: Rc::clone(device),
            in_force: Load::IDLE,
        }
    }

    fn fail(&self) -> Result<(), Sticky> {
        self.device.failures.set(self.device.failures.get() + 1);
        Err(Sticky)
    }
}

impl LoadSource for FaultyLoad {
    type Error = Sticky;
    fn set_load(&mut self, _: Time, load: Load) -> Result<(), Sticky> {
        if self.device.failing.get() && self.device.set_load_fails.get() && !load.is_idle() {
            return self.fail();
        }
        self.in_force = load;
        Ok(())
    }
    fn launch_due(&mut self, _: Time) -> Result<(), Sticky> {
        if self.in_force.is_idle() {
            return Ok(());
        }
        if self.device.failing.get() {
            return self.fail();
        }
        self.device.launched.set(self.device.launched.get() + 1);
        Ok(())
    }
}

/// A quiet GPU at 30 %: the loop always fills.
struct QuietProbe;

impl Probe for QuietProbe {
    type Error = Sticky;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Sticky> {
        Ok(Some(Utilization::saturating_from_fraction(0.3)))
    }
    fn foreign_processes(&mut self, _: Time) -> Result<Vec<ProcessInfo>, Sticky> {
        Ok(Vec::new())
    }
}

fn fill_loop(
    device: &Rc<Device>,
) -> FillLoop<QuietProbe, impl LoadSource, impl gpufill_core::Controller> {
    let first = FaultyLoad::open(device);
    let device = Rc::clone(device);
    let reopen = move || Ok(FaultyLoad::open(&device));
    FillLoop::new(
        QuietProbe,
        Reopening::new(first, reopen),
        ControllerKind::Pi.build(),
        YieldPolicy::new(YieldSettings::default()),
        FillSettings::default(),
    )
}

fn load_faults(tick: &Tick) -> usize {
    tick.events
        .iter()
        .filter(|e| matches!(e, Event::LoadFault { .. }))
        .count()
}

/// Steps from `from` to `to`, returning the ticks; each tick in which the device saw a
/// failure must report a load fault, and none may stop the loop (a context that opens
/// is not a lost GPU).
fn run<P, L, C>(fill: &mut FillLoop<P, L, C>, device: &Device, from: f64, to: f64) -> Vec<Tick>
where
    P: Probe,
    L: LoadSource,
    C: gpufill_core::Controller,
{
    let mut ticks = Vec::new();
    let mut now = Time::from_secs_f64(from);
    while now < Time::from_secs_f64(to) {
        let failures = device.failures.get();
        let tick = fill.step(now);
        if device.failures.get() > failures {
            assert!(
                load_faults(&tick) > 0,
                "a failure reported as success: {tick:?}"
            );
        }
        assert_ne!(tick.state, State::Stopped, "{tick:?}");
        ticks.push(tick);
        now += TICK;
    }
    ticks
}

#[test]
fn a_source_whose_every_launch_fails_is_reopened_with_backoff_and_reported() {
    for set_load_fails in [false, true] {
        let device = Rc::new(Device::default());
        device.set_load_fails.set(set_load_fails);
        let mut fill = fill_loop(&device);
        // One healthy second, then a minute in which every launch fails.
        run(&mut fill, &device, 0.0, 1.0);
        assert_eq!(device.opened.get(), 1);
        device.failing.set(true);
        let faulty = run(&mut fill, &device, 1.0, 61.0);
        // It was 1200 reopens a minute (one per tick); with backoff from 100 ms,
        // doubling, a handful.
        let reopens = device.opened.get() - 1;
        assert!((5..=12).contains(&reopens), "{reopens} reopens in 60 s");
        assert!(device.failures.get() <= u64::from(reopens) + 1);
        // Every tick says the load is not running: a fault, not success, and neither
        // filling nor the duty asked for.
        let faulted = faulty.iter().filter(|t| load_faults(t) > 0).count();
        assert_eq!(faulted, faulty.len(), "set_load fails: {set_load_fails}");
        for t in &faulty {
            assert_eq!((t.state, t.duty), (State::Blind, Duty::ZERO), "{t:?}");
        }
        // Logged through a per-minute rate limiter (as the binary does): one line in
        // full and one summary, plus one line per reopen from the factory.
        let mut limiter = RateLimiter::per_minute();
        let mut lines = 0;
        for t in &faulty {
            lines += usize::from(limiter.summary(t.at).is_some());
            lines += (0..load_faults(t)).filter(|_| limiter.hit(t.at)).count();
        }
        assert!(lines <= 2, "{lines} fault lines");

        // The fault clears: filling resumes by the next attempt (at most the 30 s cap).
        device.failing.set(false);
        let launched = device.launched.get();
        let after = run(&mut fill, &device, 61.0, 100.0);
        let resumed = after.iter().position(|t| load_faults(t) == 0).unwrap();
        assert!(after[resumed].at <= Time::from_secs_f64(61.0 + 30.1));
        assert!(after[resumed..].iter().all(|t| load_faults(t) == 0));
        assert!(
            after[resumed..]
                .iter()
                .all(|t| t.state == State::Filling && t.duty > Duty::ZERO),
            "{:?}",
            &after[resumed..resumed + 2]
        );
        assert!(device.launched.get() > launched + 100, "filling again");
        let reopens_at_recovery = device.opened.get();

        // After a healthy minute, a single new failure is replaced at the first delay
        // again (100 ms), not at the grown one.
        run(&mut fill, &device, 100.0, 170.0);
        assert_eq!(device.opened.get(), reopens_at_recovery);
        device.failing.set(true);
        run(&mut fill, &device, 170.0, 170.05);
        device.failing.set(false);
        let back = run(&mut fill, &device, 170.05, 171.0);
        let first_ok = back.iter().position(|t| load_faults(t) == 0).unwrap();
        assert!(back[first_ok].at <= Time::from_secs_f64(170.2), "{back:?}");
        assert_eq!(device.opened.get(), reopens_at_recovery + 1);
    }
}

/// A load source whose probe answers what it is told.
struct Prober(Option<bool>);

impl LoadSource for Prober {
    type Error = Sticky;
    fn set_load(&mut self, _: Time, _: Load) -> Result<(), Sticky> {
        Ok(())
    }
    fn probe(&mut self, _: Time) -> Result<Option<bool>, Sticky> {
        Ok(self.0)
    }
}

#[test]
fn a_probe_goes_through_to_the_current_source() {
    use gpufill_core::Reopening;
    // Before this was forwarded, the agent's probes all answered None ("cannot tell",
    // so the policy filled beside a live service: run B in
    // docs/benchmarks-history.md#the-final-build-18e08c5-beside-services-yieldidle_grace_s--4).
    for answer in [Some(true), Some(false), None] {
        let mut load = Reopening::new(Prober(answer), || Ok::<_, Sticky>(Prober(answer)));
        assert_eq!(load.probe(Time::ZERO).unwrap(), answer, "{answer:?}");
    }
}
