//! The agent over simulated GPUs, as an embedder uses it: with nothing but
//! `gpufill_runtime` (and `gpufill_sim`'s GPUs). Start, live updates, snapshots, stop,
//! join (a worker that failed, and one that panicked), drop, and the checks made before
//! starting and on every update. The agent runs on the wall clock, so each test takes a
//! few seconds.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{between, busy_in_the_next_second, holds, quick, started, wait_for, watch};
use gpufill_runtime::{
    Agent, AgentError, AgentOptions, Gpu, Loop, Metric, Opener, Settings, SimOpener, State, Time,
    WorkerError,
};
use gpufill_sim::{ForeignJob, SimConfig, SimError, SimLoad, SimProbe};

/// Long enough for a worker to open its GPU, settle and hold its target (about a
/// second on the simulated GPU's 200 ms samples), with room for a busy machine.
const SETTLE: Duration = Duration::from_secs(5);

/// One simulated GPU that holds 132 x 32 one-warp blocks at once, as an H100.
fn h100_like(opener: &SimOpener) -> Vec<Gpu> {
    let mut gpus = opener.gpus(1);
    gpus[0].max_resident_blocks = 132 * 32;
    gpus
}

fn with_width(width_blocks: u32) -> Settings {
    let mut settings = Settings::default();
    settings.load.width_blocks = width_blocks;
    settings
}

/// Waits until every GPU of `agent` fills at `target` within 3 points.
fn all_hold(agent: &Agent, target: f64) -> bool {
    wait_for(SETTLE, || {
        agent
            .snapshots()
            .iter()
            .all(|s| holds(s, target, 3.0))
            .then_some(())
    })
    .is_some()
}

#[test]
fn an_update_is_checked_against_the_gpus_as_the_start_was() {
    let opener = SimOpener::default();
    let gpus = h100_like(&opener);
    let too_wide = with_width(132 * 32 + 1);
    let refused = Agent::start(
        opener.clone(),
        gpus.clone(),
        too_wide.clone(),
        AgentOptions::default(),
    );
    let e = refused.err().expect("too wide at start");
    assert!(e.is_settings_error(), "{e}");

    let agent = Agent::start(opener, gpus, with_width(8), AgentOptions::default()).unwrap();
    let e = agent.update(too_wide.clone()).unwrap_err();
    assert_eq!(e.key, "load.width_blocks", "{e}");
    assert!(
        e.reason.contains("4225 blocks do not fit at once on GPU 0"),
        "{e}"
    );
    assert_eq!(agent.settings().load.width_blocks, 8, "nothing changed");
    // The sm metric picks its own width, and a reload keeps the metric it started with.
    let mut sm = too_wide;
    sm.metric = Metric::Sm;
    assert_eq!(agent.update(sm).unwrap_err().key, "load.width_blocks");
    agent.update(with_width(132 * 32)).unwrap();
    assert_eq!(agent.settings().load.width_blocks, 132 * 32);
    agent.stop();
    agent.join().unwrap();
}

#[test]
fn it_starts_a_worker_per_gpu_and_each_fills_at_the_target() {
    let opener = SimOpener::default();
    let gpus = opener.gpus(2);
    let agent = Agent::start(
        opener.clone(),
        gpus.clone(),
        quick(40.0),
        AgentOptions::default(),
    )
    .unwrap();
    assert!(all_hold(&agent, 40.0), "{:#?}", agent.snapshots());
    let snapshots = agent.snapshots();
    for (s, gpu) in snapshots.iter().zip(&gpus) {
        assert_eq!(s.labels.index, gpu.index);
        assert_eq!(s.labels.uuid, gpu.uuid);
        assert_eq!(s.labels.model, "simulated GPU");
        assert_eq!(s.target_percent, 40.0);
        assert!((s.duty_ratio - 0.4).abs() < 0.05, "{s:?}");
        assert_eq!(s.width_blocks, 1);
        assert!(s.worker_running && s.last_tick.is_some(), "{s:?}");
        assert_eq!((s.foreign, s.yields_total), (0, 0), "{s:?}");
    }
    assert!(opener.gpu(0).is_some() && opener.gpu(1).is_some());
    agent.stop();
    agent.join().unwrap();
}

#[test]
fn a_live_update_takes_effect_at_the_next_tick_and_keeps_the_restart_keys() {
    let opener = SimOpener::default();
    let agent = started(&opener, 1, 40.0);
    assert!(all_hold(&agent, 40.0), "{:#?}", agent.snapshots());
    let worker_since = agent.snapshots()[0].started;
    let mut new = quick(70.0);
    new.tick_ms = 25;
    assert_eq!(agent.update(new).unwrap(), ["tick_ms"]);
    let in_force = agent.settings();
    assert_eq!((in_force.target_percent, in_force.tick_ms), (70.0, 50));
    let target = wait_for(Duration::from_secs(1), || {
        (agent.snapshots()[0].target_percent == 70.0).then_some(())
    });
    assert!(target.is_some(), "{:#?}", agent.snapshots());
    assert!(all_hold(&agent, 70.0), "{:#?}", agent.snapshots());
    // The same worker all along: nothing restarted.
    assert_eq!(agent.snapshots()[0].started, worker_since);
    // Invalid settings change nothing.
    let e = agent.update(quick(101.0)).unwrap_err();
    assert_eq!(e.key, "target_percent", "{e}");
    assert_eq!(agent.settings().target_percent, 70.0);
    agent.stop();
    agent.join().unwrap();
}

#[test]
fn a_shared_agent_takes_updates_from_another_thread() {
    let opener = SimOpener::default();
    let agent = Arc::new(started(&opener, 1, 40.0));
    let updater = Arc::clone(&agent);
    std::thread::spawn(move || updater.update(quick(60.0)))
        .join()
        .unwrap()
        .unwrap();
    assert!(all_hold(&agent, 60.0), "{:#?}", agent.snapshots());
    agent.stop();
    Arc::into_inner(agent).unwrap().join().unwrap();
}

#[test]
fn snapshots_follow_a_yield_to_a_foreign_job_and_the_fill_after_it() {
    let job = ForeignJob::compute_bound(1.5, 2.5, 0.3);
    let opener = SimOpener::new(SimConfig {
        foreign: vec![job.clone()],
        ..SimConfig::default()
    });
    let agent = started(&opener, 1, 40.0);
    let seen = watch(&agent, &opener, 5.0);
    let gpu = &seen[0];
    // Filling at the target before the job.
    assert!(
        between(gpu, 1.0, 1.5).all(|s| holds(s, 40.0, 3.0)),
        "{gpu:#?}"
    );
    // Yielding to it at once (within two ticks), idle, naming it.
    for s in between(gpu, 1.6, 2.5) {
        assert_eq!(s.state, Some(State::Yielding), "{s:?}");
        assert_eq!((s.duty_ratio, s.foreign), (0.0, 1), "{s:?}");
    }
    // The grace (0.5 s) after it left, then the target again, the yield counted once.
    assert!(
        between(gpu, 2.6, 2.95).all(|s| s.state == Some(State::Yielding)),
        "{gpu:#?}"
    );
    assert!(
        between(gpu, 4.0, 5.0).all(|s| holds(s, 40.0, 3.0)),
        "{gpu:#?}"
    );
    assert_eq!(gpu.last().unwrap().1.yields_total, 1);
    agent.stop();
    agent.join().unwrap();
    // The job never met a kernel of ours.
    let sim = opener.gpu(0).unwrap();
    let report = sim.report(sim.now());
    assert_eq!(report.foreign[0].pid, job.pid);
    assert_eq!(report.foreign[0].overlap, Duration::ZERO, "{report:?}");
}

#[test]
fn stop_leaves_every_gpu_idle_and_join_returns_once_all_workers_ended() {
    let opener = SimOpener::default();
    let agent = started(&opener, 2, 50.0);
    assert!(all_hold(&agent, 50.0), "{:#?}", agent.snapshots());
    let registry = agent.registry();
    agent.stop();
    agent.join().unwrap();
    for s in registry.snapshots() {
        assert!(!s.worker_running, "{s:?}");
        // Left filling at 50 %, the model would run our kernels half of the next second;
        // stopped, at most the burst already queued finishes.
        let busy = busy_in_the_next_second(&opener, s.labels.index);
        assert!(
            busy <= Duration::from_millis(20),
            "GPU {}: {busy:?}",
            s.labels.index
        );
    }
}

#[test]
fn an_agent_dropped_without_join_stops_its_workers() {
    let opener = SimOpener::default();
    let agent = started(&opener, 2, 50.0);
    assert!(all_hold(&agent, 50.0), "{:#?}", agent.snapshots());
    let registry = agent.registry();
    drop(agent);
    let ended = wait_for(Duration::from_secs(2), || {
        registry
            .snapshots()
            .iter()
            .all(|s| !s.worker_running)
            .then_some(())
    });
    assert!(ended.is_some(), "{:#?}", registry.snapshots());
    for index in [0, 1] {
        let busy = busy_in_the_next_second(&opener, index);
        assert!(busy <= Duration::from_millis(20), "GPU {index}: {busy:?}");
    }
}

#[test]
fn join_names_each_gpu_whose_worker_failed_and_why() {
    let lost_at = |s: f64| SimConfig {
        lost_at: Some(Time::from_secs_f64(s)),
        ..SimConfig::default()
    };
    // GPU 1 cannot be opened at all; GPU 2 is lost after 0.3 s, for good.
    let opener = SimOpener::default()
        .with_gpu(1, lost_at(0.0))
        .with_gpu(2, lost_at(0.3));
    let agent = started(&opener, 3, 40.0);
    let failed = wait_for(SETTLE, || {
        let s = agent.snapshots();
        let done = holds(&s[0], 40.0, 3.0)
            && !s[1].worker_running
            && s[2].state == Some(State::Stopped)
            && s[2].worker_running;
        done.then_some(())
    });
    assert!(failed.is_some(), "{:#?}", agent.snapshots());
    agent.stop();
    let Err(AgentError::Workers { failed, total }) = agent.join() else {
        panic!("GPUs 1 and 2 failed");
    };
    assert_eq!(total, 3);
    let indices: Vec<u32> = failed.iter().map(|(gpu, _)| *gpu).collect();
    assert_eq!(indices, [1, 2]);
    let WorkerError::Open(why) = &failed[0].1 else {
        panic!("{:?}", failed[0]);
    };
    assert_eq!(why.downcast_ref::<SimError>(), Some(&SimError::Lost));
    assert!(matches!(failed[1].1, WorkerError::Lost), "{:?}", failed[1]);
    let e = AgentError::Workers { failed, total };
    assert_eq!(
        e.to_string(),
        "2 of 3 GPU workers failed: GPU 1: simulated GPU lost; GPU 2: stopped filling: the GPU \
         failed and was not reopened (see the log above)"
    );
    assert!(!e.is_settings_error());
}

/// An opener whose every opening panics.
struct Panicking;

impl Opener for Panicking {
    type Probe = SimProbe;
    type Load = SimLoad;
    type Error = SimError;

    fn open(
        &self,
        gpu: &Gpu,
        _: &Settings,
        _: bool,
        _: Time,
    ) -> Result<Loop<SimProbe, SimLoad>, SimError> {
        panic!("opening GPU {} panicked", gpu.index)
    }
}

#[test]
fn a_worker_that_panics_ends_alone_and_join_says_so() {
    let gpus = SimOpener::default().gpus(1);
    let agent = Agent::start(
        Panicking,
        gpus,
        Settings::default(),
        AgentOptions::default(),
    )
    .unwrap();
    let ended = wait_for(Duration::from_secs(2), || {
        (!agent.snapshots()[0].worker_running).then_some(())
    });
    assert!(ended.is_some(), "said at once, not at join");
    let Err(AgentError::Workers { failed, total: 1 }) = agent.join() else {
        panic!("it panicked");
    };
    assert!(
        matches!(failed[..], [(0, WorkerError::Panicked)]),
        "{failed:?}"
    );
}
