//! Scenarios inside a PID namespace of our own, on the simulated GPU: NVML lists none
//! of the foreign jobs, and gpufill must see them by device memory, per-process samples
//! and utilization (`gpufill_core::unlisted`), keeping each policy's promise as it does
//! in the host view. The simulated namespace is the one measured
//! (docs/benchmarks.md#inside-a-pid-namespace-of-its-own-scriptsns_signalspy-scriptsnamespace_benchpy;
//! raw in docs/data/ns-signals-h100.txt): a PyTorch newcomer's memory ramp, its context
//! complete a little after the host would list it, per-process samples late
//! ([`SimConfig::H100_PROCESS_SAMPLE_LAG`]). Ticks and bursts are the defaults (50 ms,
//! a burst of `duty x 50 ms` still running after a stop).

use std::time::Duration;

use gpufill_core::LoopSettings;
use gpufill_core::{
    ControllerKind, Event, FillSettings, PidView, State, Tick, Time, Utilization, YieldMode,
    YieldSettings,
};
use gpufill_sim::{ForeignJob, Rng, SimConfig, Simulation};

const TICK: Duration = Duration::from_millis(50);
const MIB: i64 = 1 << 20;

fn secs(s: f64) -> Time {
    Time::from_secs_f64(s)
}

/// The measured namespace view with the default loop's burst tail.
fn namespace(foreign: Vec<ForeignJob>) -> SimConfig {
    SimConfig {
        foreign,
        stop_tail: Duration::from_millis(25),
        ..SimConfig::default().pid_namespace()
    }
}

/// A PyTorch job whose context starts before `listed_s` (when the host view would
/// list it) and is ready 166 ms after, as measured; it works at `load` in `work` (the
/// whole stay when `None`) and leaves at `leaves_s`.
fn pytorch(listed_s: f64, leaves_s: f64, load: f64, work: Option<(f64, f64)>) -> ForeignJob {
    ForeignJob {
        first_kernel_after: Duration::from_millis(166),
        work: work.map(|(from, to)| (secs(from), secs(to))),
        ..ForeignJob::compute_bound(listed_s, leaves_s, load)
    }
}

/// A job that holds its context and never runs a kernel.
fn idle_holder(listed_s: f64, leaves_s: f64) -> ForeignJob {
    pytorch(listed_s, leaves_s, 1.0, Some((leaves_s, leaves_s)))
}

fn presence() -> YieldSettings {
    YieldSettings::default()
}

fn activity() -> YieldSettings {
    YieldSettings {
        mode: YieldMode::Activity {
            idle_grace: Duration::from_secs(3),
        },
        ..YieldSettings::default()
    }
}

fn sim(cfg: SimConfig, y: YieldSettings) -> Simulation {
    let settings = FillSettings {
        target: Utilization::from_percent(50.0).unwrap(),
        ..FillSettings::default()
    };
    Simulation::new(
        cfg,
        &LoopSettings {
            fill: settings,
            yielding: y,
            controller: ControllerKind::Pi,
        },
        TICK,
    )
}

fn state_at(ticks: &[Tick], t: f64) -> State {
    ticks.iter().find(|k| k.at >= secs(t)).unwrap().state
}

fn first(ticks: &[Tick], from: f64, state: State) -> Time {
    ticks
        .iter()
        .find(|k| k.at >= secs(from) && k.state == state)
        .unwrap_or_else(|| panic!("no {state:?} from {from} s"))
        .at
}

fn yielded_unlisted(ticks: &[Tick]) -> bool {
    ticks.iter().any(|t| {
        t.events
            .iter()
            .any(|e| matches!(e, Event::Yielded { pids, unlisted: true } if pids.is_empty()))
    })
}

#[test]
fn the_simulated_namespace_lists_no_foreign_job() {
    use gpufill_core::Probe;
    let gpu = gpufill_sim::SimGpu::new(namespace(vec![pytorch(1.0, 5.0, 1.0, None)]));
    let mut probe = gpu.probe();
    assert!(probe.foreign_processes(secs(2.0)).unwrap().is_empty());
    assert_eq!(gpu.listed_count(secs(2.0)), 1, "it is there all the same");
}

// ---- presence ----

#[test]
fn presence_stays_idle_for_a_job_that_was_there_before_it_started() {
    let mut s = sim(namespace(vec![pytorch(0.5, 20.0, 1.0, None)]), presence());
    s.start_at(secs(2.0));
    let ticks = s.collect_until(secs(30.0));
    assert!(yielded_unlisted(&ticks));
    for t in ticks.iter().filter(|t| t.at < secs(20.0)) {
        assert_eq!(t.state, State::Yielding, "{t:?}");
        assert_eq!(t.foreign, 1, "an unlisted process counts as one: {t:?}");
    }
    // It left at 20 s: the grace, then filling.
    assert_eq!(state_at(&ticks, 24.9), State::Yielding);
    assert_eq!(state_at(&ticks, 25.1), State::Filling);
    let r = s.gpu().report(secs(30.0));
    assert_eq!(r.foreign[0].overlap, Duration::ZERO, "{r:?}");
}

#[test]
fn presence_stays_idle_beside_an_unlisted_idle_holder() {
    let mut s = sim(namespace(vec![idle_holder(5.0, 30.0)]), presence());
    let ticks = s.collect_until(secs(40.0));
    assert_eq!(state_at(&ticks, 4.9), State::Filling);
    // Its memory passes the margin 24 ms before the host view would list it.
    let yielded = first(&ticks, 4.0, State::Yielding);
    assert!(yielded <= secs(5.0), "{yielded:?}");
    for t in ticks
        .iter()
        .filter(|t| t.at >= secs(5.0) && t.at < secs(34.9))
    {
        assert_eq!(t.state, State::Yielding, "{t:?}");
    }
    // It left at 30 s (last seen at the 29.95 s tick): the 5 s grace, then filling.
    assert_eq!(state_at(&ticks, 35.0), State::Filling);
}

#[test]
fn presence_is_idle_before_an_unlisted_newcomers_first_kernel() {
    for listed in [5.0, 5.013, 5.027, 5.041] {
        let job = pytorch(listed, 12.0, 1.0, None);
        let first_kernel = job.listed_at + job.first_kernel_after;
        let mut s = sim(namespace(vec![job]), presence());
        let ticks = s.collect_until(secs(20.0));
        let yielded = first(&ticks, 4.0, State::Yielding);
        // Our last burst ends a tail after the yield, long before its first kernel.
        assert!(
            yielded + Duration::from_millis(25) < first_kernel,
            "{listed}: {yielded:?}"
        );
        let r = s.gpu().report(secs(20.0));
        assert_eq!(r.foreign[0].overlap, Duration::ZERO, "{listed}: {r:?}");
        assert!(r.foreign[0].slowdown < 1e-9, "{listed}: {r:?}");
    }
}

/// The driver's own memory moving by a few MiB for `minutes` (seeded).
fn driver_wobble(seed: u64, minutes: u32) -> Vec<(Time, i64)> {
    let mut rng = Rng::new(seed);
    let mut level = 0i64;
    (0..minutes * 4)
        .map(|i| {
            // Within [-6, +6] MiB of the start: less than the 16 MiB margin apart.
            let next = (rng.uniform(-6.0, 6.0) as i64) * MIB;
            let step = next - level;
            level = next;
            (secs(f64::from(i) * 15.0 + rng.uniform(0.0, 10.0)), step)
        })
        .collect()
}

#[test]
fn the_driver_moving_a_little_never_makes_either_policy_yield() {
    for y in [presence(), activity()] {
        let cfg = SimConfig {
            driver_memory: driver_wobble(7, 10),
            ..namespace(Vec::new())
        };
        let mut s = sim(cfg, y.clone());
        let ticks = s.collect_until(secs(600.0));
        assert!(
            ticks.iter().all(|t| t.state == State::Filling),
            "{:?}: {:?}",
            y.mode,
            ticks.iter().find(|t| t.state != State::Filling)
        );
    }
}

#[test]
fn a_simulated_day_of_an_idle_driver_wobbling_never_yields() {
    let cfg = SimConfig {
        driver_memory: driver_wobble(2026, 24 * 60),
        ..namespace(Vec::new())
    };
    let mut s = sim(cfg, presence());
    let mut not_filling = 0u64;
    let mut ticks = 0u64;
    s.run_until(secs(86_400.0), |t| {
        ticks += 1;
        not_filling += u64::from(t.state != State::Filling);
    });
    assert_eq!(ticks, 86_400 * 20);
    assert_eq!(not_filling, 0);
}

#[test]
fn presence_resumes_with_its_context_released_and_reopened_without_yielding_to_itself() {
    let cfg = namespace(vec![pytorch(5.0, 12.0, 1.0, None)]);
    let settings = FillSettings {
        target: Utilization::from_percent(50.0).unwrap(),
        release_after: Some(Duration::from_secs(2)),
        ..FillSettings::default()
    };
    let mut s = Simulation::new(
        cfg,
        &LoopSettings {
            fill: settings,
            yielding: presence(),
            controller: ControllerKind::Pi,
        },
        TICK,
    );
    let ticks = s.collect_until(secs(40.0));
    assert!(ticks.iter().any(|t| t.events.contains(&Event::Released)));
    let resumed = first(&ticks, 12.0, State::Filling);
    assert!(resumed <= secs(17.1), "{resumed:?}");
    assert!(s.gpu().holds_context());
    for t in ticks.iter().filter(|t| t.at >= resumed) {
        assert_eq!(t.state, State::Filling, "{t:?}");
    }
}

// ---- activity ----

#[test]
fn activity_yields_to_a_job_that_was_there_before_it_started_while_it_works() {
    let mut s = sim(namespace(vec![pytorch(0.5, 20.0, 1.0, None)]), activity());
    s.start_at(secs(2.0));
    let ticks = s.collect_until(secs(30.0));
    for t in ticks.iter().filter(|t| t.at < secs(20.0)) {
        assert_eq!(t.state, State::Yielding, "{t:?}");
    }
    let r = s.gpu().report(secs(30.0));
    assert_eq!(r.foreign[0].overlap, Duration::ZERO, "{r:?}");
}

#[test]
fn activity_fills_beside_an_unlisted_idle_holder_once_quiet() {
    let mut s = sim(namespace(vec![idle_holder(5.0, 30.0)]), activity());
    let ticks = s.collect_until(secs(30.0));
    // Appearing counts as working, as a listed newcomer does.
    assert!(first(&ticks, 4.0, State::Yielding) <= secs(5.0));
    assert_eq!(state_at(&ticks, 7.9), State::Yielding);
    assert_eq!(state_at(&ticks, 8.2), State::Filling);
    for t in ticks.iter().filter(|t| t.at >= secs(8.2)) {
        assert_eq!(t.state, State::Filling, "{t:?}");
    }
}

#[test]
fn activity_is_idle_before_an_unlisted_newcomers_first_kernel() {
    let job = pytorch(5.0, 12.0, 1.0, None);
    let first_kernel = job.listed_at + job.first_kernel_after;
    let mut s = sim(namespace(vec![job]), activity());
    let ticks = s.collect_until(secs(20.0));
    assert!(first(&ticks, 4.0, State::Yielding) + Duration::from_millis(25) < first_kernel);
    let r = s.gpu().report(secs(20.0));
    assert_eq!(r.foreign[0].overlap, Duration::ZERO, "{r:?}");
}

/// A notebook in the namespace's blind spot: holds its context from 2 s to 40 s and
/// works lightly from 10 s to 15 s.
fn light_notebook(load: f64) -> ForeignJob {
    pytorch(2.0, 40.0, load, Some((10.0, 15.0)))
}

#[test]
fn activity_pauses_at_our_first_kernel_after_an_unlisted_holders_work_and_holds_while_it_works() {
    // 5 % busy: too light to show in the device utilization; its per-process samples
    // show it late. Our kernels see it at once (issue 21: before, the samples
    // were the first sign).
    let mut s = sim(namespace(vec![light_notebook(0.05)]), activity());
    let ticks = s.collect_until(secs(40.0));
    assert_eq!(state_at(&ticks, 9.9), State::Filling);
    let paused = first(&ticks, 10.0, State::Yielding);
    assert!(paused <= secs(10.0) + 2 * TICK, "{paused:?}");
    let tick = ticks.iter().find(|t| t.at == paused).unwrap();
    assert!(
        tick.events.iter().any(|e| matches!(
            e,
            Event::Paused {
                pids,
                unlisted: true,
                sign: Some(_),
            } if pids.is_empty()
        )),
        "a pause, not a yield: {tick:?}"
    );
    // Holding off, gpufill reads no per-process samples (a probe at the end of each
    // hold sees more, and at once): the probes find its work until it has been quiet for
    // half a hold (the hold's marker), then one is clean. It stays idle at least an idle
    // grace after the cell's last kernel (15 s).
    let grace = Duration::from_secs(3);
    for t in ticks
        .iter()
        .filter(|t| t.at > paused && t.at < secs(15.0) + grace)
    {
        assert_eq!(t.state, State::Yielding, "{t:?}");
    }
    let refilled = ticks
        .iter()
        .find(|t| t.at > paused && t.state == State::Filling)
        .unwrap();
    assert_eq!(refilled.probed, Some(false), "{refilled:?}");
    // The probes found it live twice (it worked 5 s, longer than the idle grace), so
    // the hold after the last one is twice the idle grace: filled beside again within
    // three idle graces of the cell's last kernel.
    assert!(
        refilled.at <= secs(15.0) + 3 * grace + 2 * TICK,
        "{refilled:?}"
    );
    let probes: Vec<bool> = ticks
        .iter()
        .filter(|t| t.at > paused && t.at <= refilled.at)
        .filter_map(|t| t.probed)
        .collect();
    // Those while the cell ran found it; after it, the last hold's marker and the
    // probe that ends the hold found nobody.
    assert!(probes.len() >= 2, "{probes:?}");
    assert_eq!(probes.last(), Some(&false), "{probes:?}");
    let found = probes.iter().take_while(|&&p| p).count();
    assert!(found >= 2, "{probes:?}");
    assert!(probes[found..].iter().all(|&p| !p), "{probes:?}");
}

#[test]
fn activity_sees_heavy_unlisted_work_in_the_utilization_before_its_samples() {
    // Compute-bound: the device reads well beyond our duty within a sample or two.
    let mut s = sim(namespace(vec![light_notebook(1.0)]), activity());
    let ticks = s.collect_until(secs(20.0));
    let yielded = first(&ticks, 10.0, State::Yielding);
    assert!(yielded <= secs(10.5), "{yielded:?}");
}

#[test]
fn activity_yields_when_a_second_unlisted_job_comes_beside_a_quiet_holder() {
    let cfg = namespace(vec![idle_holder(2.0, 40.0), pytorch(12.0, 20.0, 1.0, None)]);
    let first_kernel = cfg.foreign[1].listed_at + cfg.foreign[1].first_kernel_after;
    let mut s = sim(cfg, activity());
    let ticks = s.collect_until(secs(20.0));
    assert_eq!(state_at(&ticks, 11.9), State::Filling);
    assert!(first(&ticks, 11.0, State::Yielding) + Duration::from_millis(25) < first_kernel);
    let r = s.gpu().report(secs(20.0));
    assert_eq!(r.foreign[1].overlap, Duration::ZERO, "{r:?}");
}

// ---- without per-process sizes ----

#[test]
fn without_process_sizes_presence_still_yields_to_heavy_unlisted_work() {
    let cfg = SimConfig {
        process_sizes: false,
        ..namespace(vec![pytorch(5.0, 15.0, 1.0, None)])
    };
    let mut s = sim(cfg, presence());
    let ticks = s.collect_until(secs(15.0));
    // Utilization beyond our duty shows it within a few samples (its first kernels do
    // meet ours: memory, the signal that leads, is missing here).
    let yielded = first(&ticks, 5.0, State::Yielding);
    assert!(yielded <= secs(5.8), "{yielded:?}");
    for t in ticks
        .iter()
        .filter(|t| t.at >= secs(6.0) && t.at < secs(15.0))
    {
        assert_eq!(t.state, State::Yielding, "{t:?}");
    }
    assert_eq!(PidView::Namespace.as_str(), "namespace");
}
