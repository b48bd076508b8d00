//! How often the fill loop reads the process list: every tick while filling (a newcomer
//! must be seen before its first kernel), every `YIELDING_POLL` while yielding to a listed
//! process, every tick again during the grace; and no burst of reads after a step that
//! overran its tick.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use gpufill_core::fill::YIELDING_POLL;
use gpufill_core::{
    Clock, ControllerKind, FillLoop, FillSettings, Load, LoadSource, Probe, ProcessInfo, State,
    Time, Utilization, VirtualClock, YieldPolicy, YieldSettings,
};

/// One foreign process listed while `listed(now)`; records when the list was read.
struct CountingProbe {
    reads: Rc<RefCell<Vec<Time>>>,
    listed: fn(Time) -> bool,
}

fn one_to_three_s(now: Time) -> bool {
    now >= Time::from_secs_f64(1.0) && now < Time::from_secs_f64(3.0)
}

impl Probe for CountingProbe {
    type Error = Infallible;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Infallible> {
        Ok(Some(Utilization::saturating_from_fraction(0.5)))
    }
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Infallible> {
        self.reads.borrow_mut().push(now);
        Ok(if (self.listed)(now) {
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

/// The loop over `probe` with no load source, a PI controller and `settings`.
fn pi_loop<P: Probe>(
    probe: P,
    settings: YieldSettings,
) -> FillLoop<P, NoLoad, impl gpufill_core::Controller> {
    FillLoop::new(
        probe,
        NoLoad,
        ControllerKind::Pi.build(),
        YieldPolicy::new(settings),
        FillSettings::default(),
    )
}

#[test]
fn the_list_is_read_every_tick_while_filling_and_every_100_ms_while_yielding() {
    let reads = Rc::new(RefCell::new(Vec::new()));
    let probe = CountingProbe {
        reads: Rc::clone(&reads),
        listed: one_to_three_s,
    };
    let settings = YieldSettings {
        grace: Duration::from_secs(1),
        ..YieldSettings::default()
    };
    let mut fill = pi_loop(probe, settings);
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
    // Yielding while it is listed (1 s to 3 s): one read per 100 ms, 19 in 1.1-3.0 s.
    let listed = between(1.1, 3.0);
    assert!((18..=20).contains(&listed), "{listed} reads while listed");
    // The grace (3 s to 4 s): every tick again, so the return to filling rests on fresh
    // reads.
    assert!(
        between(3.1, 3.9) >= 79,
        "{} reads in the grace",
        between(3.1, 3.9)
    );
    // Back to filling one grace after the last tick that saw it (at most one poll late).
    let resumed = states
        .iter()
        .find(|(t, s)| *t > Time::from_secs_f64(3.0) && *s == State::Filling)
        .unwrap();
    assert!(resumed.0 >= Time::from_secs_f64(3.99), "{resumed:?}");
    assert!(
        resumed.0 <= Time::from_secs_f64(4.0) + YIELDING_POLL,
        "{resumed:?}"
    );
    assert_eq!(between(4.5, 5.5), 100);
}

#[test]
fn a_process_back_at_the_end_of_the_grace_is_seen_before_filling() {
    // Found by the property test: listed at 0 ms, gone at 11 ms, back at 21 ms, grace
    // 21 ms. A list reused from 11 ms would have shown none at 21 ms and filled.
    fn gone_between_10_and_20_ms(now: Time) -> bool {
        !(Time::from_millis(10)..Time::from_millis(20)).contains(&now)
    }
    let probe = CountingProbe {
        reads: Rc::new(RefCell::new(Vec::new())),
        listed: gone_between_10_and_20_ms,
    };
    let settings = YieldSettings {
        grace: Duration::from_millis(21),
        ..YieldSettings::default()
    };
    let mut fill = FillLoop::new(
        probe,
        NoLoad,
        ControllerKind::Window.build(),
        YieldPolicy::new(settings),
        FillSettings::default(),
    );
    for ms in [0, 11, 21, 31, 200] {
        let tick = fill.step(Time::from_millis(ms));
        assert_eq!(tick.state, State::Yielding, "at {ms} ms: {tick:?}");
        assert!(tick.duty.is_zero(), "at {ms} ms: {tick:?}");
    }
}

/// A probe whose process read at `slow_at` takes `slow_for` of the virtual clock.
struct SlowOnceProbe<'a> {
    clock: &'a VirtualClock,
    reads: Vec<Time>,
    slow_at: Time,
    slow_for: Duration,
}

impl Probe for SlowOnceProbe<'_> {
    type Error = Infallible;
    fn utilization(&mut self, _: Time) -> Result<Option<Utilization>, Infallible> {
        Ok(None)
    }
    fn foreign_processes(&mut self, now: Time) -> Result<Vec<ProcessInfo>, Infallible> {
        self.reads.push(now);
        if now == self.slow_at {
            self.clock.sleep_until(now + self.slow_for);
        }
        Ok(Vec::new())
    }
}

#[test]
fn after_a_step_that_overran_the_loop_does_not_catch_up_with_back_to_back_ticks() {
    let clock = VirtualClock::starting_at(Time::ZERO);
    let probe = SlowOnceProbe {
        clock: &clock,
        reads: Vec::new(),
        slow_at: Time::from_millis(500),
        slow_for: Duration::from_millis(180),
    };
    let mut fill = pi_loop(probe, YieldSettings::default());
    let tick = Duration::from_millis(50);
    fill.run(&clock, tick, |t| t.at < Time::from_millis(1000));
    let reads = &fill.probe().reads;
    let gaps: Vec<Duration> = reads.windows(2).map(|w| w[1] - w[0]).collect();
    // 50 ms apart before, one 180 ms gap for the slow read, then 50 ms again (not three
    // reads in a row at 680 ms to make up for the ticks due at 550, 600 and 650 ms).
    assert!(gaps.iter().all(|g| *g >= tick), "{reads:?}");
    assert_eq!(
        reads
            .iter()
            .filter(|t| **t == Time::from_millis(680))
            .count(),
        1
    );
    assert!(reads.contains(&Time::from_millis(730)), "{reads:?}");
}

/// A newcomer listed from 1.013 s on, with ticks every 50 ms (at 1.000 and 1.050 s):
/// the first yielding step, run through `Supervisor::run_watched` with `hint`.
fn first_yield_with(hint: &mut impl gpufill_core::Hint, until: Time) -> (Time, usize) {
    use gpufill_core::{RetrySettings, Supervisor};
    let reads = Rc::new(RefCell::new(Vec::new()));
    fn from_1013_ms(now: Time) -> bool {
        now >= Time::from_millis(1013)
    }
    let probe = CountingProbe {
        reads: Rc::clone(&reads),
        listed: from_1013_ms,
    };
    let fill = pi_loop(probe, YieldSettings::default());
    let mut supervisor = Supervisor::new(
        fill,
        |_| -> Result<FillLoop<CountingProbe, NoLoad, _>, Infallible> { unreachable!() },
        RetrySettings::default(),
    );
    let clock = VirtualClock::starting_at(Time::ZERO);
    let mut first = None;
    supervisor.run_watched(
        &clock,
        Duration::from_millis(50),
        hint,
        |fill, now| fill.step(now),
        |s| {
            if s.tick.state == State::Yielding && first.is_none() {
                first = Some(s.tick.at);
            }
            s.tick.at < until
        },
    );
    let n = reads.borrow().len();
    (first.expect("never yielded"), n)
}

#[test]
fn a_hint_lets_the_loop_see_a_newcomer_within_milliseconds_of_its_listing() {
    let until = Time::from_millis(1100);
    let (plain, plain_reads) = first_yield_with(&mut gpufill_core::NoHint, until);
    assert_eq!(
        plain,
        Time::from_millis(1050),
        "without a hint: the next tick"
    );
    // The device files were opened 60 ms before the listing.
    let mut hint = gpufill_core::HintsAt {
        at: [Time::from_millis(953)].into(),
    };
    let (hinted, hinted_reads) = first_yield_with(&mut hint, until);
    let every = gpufill_core::hint::WATCH_EVERY;
    assert!(
        hinted >= Time::from_millis(1013) && hinted <= Time::from_millis(1013) + every,
        "{hinted:?}"
    );
    // The window reads the list every WATCH_EVERY until the listing (60 ms of it).
    let polls = (60 / every.as_millis()) as usize;
    assert!(
        (plain_reads + polls - 2..=plain_reads + polls + 2).contains(&hinted_reads),
        "{plain_reads} {hinted_reads} {polls}"
    );
}

#[test]
fn a_hint_with_nobody_coming_costs_one_window_of_reads() {
    use gpufill_core::hint::{WATCH_EVERY, WATCH_WINDOW};
    // The device files opened at 0.503 s by a process that never creates a context
    // (nvidia-smi): the list is read through one window, then once a tick again
    // (the newcomer listed at 1.013 s is yielded to at the 1.05 s tick either way).
    let until = Time::from_millis(1100);
    let (_, plain_reads) = first_yield_with(&mut gpufill_core::NoHint, until);
    let mut hint = gpufill_core::HintsAt {
        at: [Time::from_millis(503)].into(),
    };
    let (_, reads) = first_yield_with(&mut hint, until);
    let window = (WATCH_WINDOW.as_millis() / WATCH_EVERY.as_millis()) as usize;
    assert!(
        (plain_reads + window - 4..=plain_reads + window + 1).contains(&reads),
        "{plain_reads} + {window} against {reads}"
    );
    assert!(window <= 50, "a window of {window} reads");
}

#[test]
fn a_hint_while_not_filling_reads_nothing_more() {
    use gpufill_core::HintsAt;
    // Hinted during the yield (from 1.013 s): no extra reads beyond the ticks.
    let until = Time::from_secs_f64(2.0);
    let (_, plain_reads) = first_yield_with(&mut gpufill_core::NoHint, until);
    let mut hint = HintsAt {
        at: [Time::from_millis(1500)].into(),
    };
    let (_, reads) = first_yield_with(&mut hint, until);
    assert_eq!(reads, plain_reads);
}

#[test]
fn a_load_source_that_cannot_probe_leaves_the_tick_saying_so() {
    use gpufill_core::YieldMode;
    // NoLoad cannot probe: the policy fills beside the quiet process on NVML's word, and
    // the tick must not claim that a probe found nobody.
    fn always(_: Time) -> bool {
        true
    }
    let probe = CountingProbe {
        reads: Rc::new(RefCell::new(Vec::new())),
        listed: always,
    };
    let settings = YieldSettings {
        mode: YieldMode::Activity {
            idle_grace: Duration::from_millis(100),
        },
        ..YieldSettings::default()
    };
    let mut fill = pi_loop(probe, settings);
    let mut now = Time::ZERO;
    let beside = loop {
        let tick = fill.step(now);
        if tick.state == State::Filling {
            break tick;
        }
        assert!(now < Time::from_secs_f64(1.0), "never filled beside");
        now += Duration::from_millis(10);
    };
    assert_eq!(beside.probed, None, "{beside:?}");
}
