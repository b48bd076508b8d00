//! One agent over several simulated GPUs (issue 25's CPU part: no machine with several
//! GPUs ran it yet): every GPU fills at the target; what happens on one GPU (a foreign
//! job, a quiet holder, a live service) changes only that GPU, which behaves as it does
//! alone; GPUs are selected by index and UUID and carry their labels into the
//! snapshots and metrics; stopping leaves every GPU idle.

mod common;

use std::time::Duration;

use common::{Seen, between, busy_in_the_next_second, holds, quick, started, wait_for, watch};
use gpufill_runtime::prometheus::{self, Process};
use gpufill_runtime::{Agent, AgentOptions, GpuSelector, PidView, SimOpener, State};
use gpufill_sim::{ForeignJob, SimConfig};

const TARGET: f64 = 50.0;

/// A request of the sub-millisecond service of issue 21, as long as alone
/// (docs/benchmarks.md#live-services-labpy-live).
const REQUEST: Duration = Duration::from_micros(870);

/// A model with `jobs` on it.
fn with(jobs: Vec<ForeignJob>) -> SimConfig {
    SimConfig {
        foreign: jobs,
        ..SimConfig::default()
    }
}

fn start(opener: &SimOpener, n: u32) -> Agent {
    started(opener, n, TARGET)
}

/// Stops `agent`, joins it, and checks that no GPU runs a kernel of ours afterwards.
fn stop_idle(agent: Agent, opener: &SimOpener, n: u32) {
    agent.stop();
    agent.join().unwrap();
    for index in 0..n {
        let busy = busy_in_the_next_second(opener, index);
        assert!(busy <= Duration::from_millis(20), "GPU {index}: {busy:?}");
    }
}

/// A GPU nobody else uses: at the target from 1 s on, every reading within 3 points
/// (no dip), never a yield.
fn alone(seen: &Seen, to_s: f64) {
    for s in between(seen, 1.0, to_s) {
        assert!(holds(s, TARGET, 3.0), "{s:?}");
    }
    assert_eq!(seen.last().unwrap().1.yields_total, 0);
}

#[test]
fn every_gpu_fills_at_the_target_and_a_job_on_one_makes_only_that_one_yield() {
    // Four GPUs; a job wanting half of GPU 2 from 2 s to 3.5 s.
    let job = ForeignJob::compute_bound(2.0, 3.5, 0.5);
    let opener = SimOpener::default().with_gpu(2, with(vec![job]));
    let agent = start(&opener, 4);
    let seen = watch(&agent, &opener, 6.0);
    for gpu in [0, 1, 3] {
        alone(&seen[gpu], 6.0);
    }
    let two = &seen[2];
    assert!(
        between(two, 1.0, 2.0).all(|s| holds(s, TARGET, 3.0)),
        "{two:#?}"
    );
    for s in between(two, 2.1, 3.5) {
        assert_eq!(s.state, Some(State::Yielding), "{s:?}");
        assert_eq!((s.duty_ratio, s.foreign), (0.0, 1), "{s:?}");
    }
    // Its grace (0.5 s), then the target again.
    assert!(
        between(two, 5.0, 6.0).all(|s| holds(s, TARGET, 3.0)),
        "{two:#?}"
    );
    assert_eq!(two.last().unwrap().1.yields_total, 1);
    stop_idle(agent, &opener, 4);
    let sim = opener.gpu(2).unwrap();
    assert_eq!(sim.report(sim.now()).foreign[0].overlap, Duration::ZERO);
}

/// A holder listed at 0.5 s that answers 20 requests a second from 3.5 s on.
fn dormant_holder() -> ForeignJob {
    ForeignJob::isolated_requests(0.5, 60.0, 20.0, REQUEST).dormant_until(3.5)
}

/// A service listed at 0.5 s that answers 20 requests a second from its first kernel.
fn live_service() -> ForeignJob {
    ForeignJob::isolated_requests(0.5, 60.0, 20.0, REQUEST)
}

/// Beside the dormant holder: idle for its idle grace (1 s), filled beside one kernel
/// shape at the target until it wakes at 3.5 s, idle from its first request on.
/// Returns when filling beside it began.
fn filled_beside_until_it_wakes(seen: &Seen) -> f64 {
    for s in between(seen, 0.6, 1.45) {
        assert_eq!(
            (s.state, s.duty_ratio),
            (Some(State::Yielding), 0.0),
            "{s:?}"
        );
    }
    let (began, _) = seen
        .iter()
        .find(|(_, s)| s.filling_beside)
        .unwrap_or_else(|| panic!("never filled beside: {seen:#?}"));
    assert!((1.5..1.8).contains(began), "{began}");
    for s in between(seen, began + 0.8, 3.5) {
        assert!(s.filling_beside && holds(s, TARGET, 3.0), "{s:?}");
    }
    for s in between(seen, 3.7, 60.0) {
        assert_eq!(
            (s.state, s.duty_ratio),
            (Some(State::Yielding), 0.0),
            "{s:?}"
        );
        assert!(!s.filling_beside, "{s:?}");
    }
    *began
}

/// Beside the live service: never filled beside, idle from its listing on.
fn never_filled_beside(seen: &Seen) {
    for s in between(seen, 0.6, 60.0) {
        assert_eq!(
            (s.state, s.duty_ratio),
            (Some(State::Yielding), 0.0),
            "{s:?}"
        );
        assert!(!s.filling_beside, "{s:?}");
    }
    assert!(seen.last().unwrap().1.foreign >= 1 || seen.last().unwrap().1.pauses_total >= 1);
}

#[test]
fn a_quiet_holder_and_a_live_service_on_two_gpus_of_three_get_what_one_gpu_gives() {
    // GPU 0 alone, GPU 1 a dormant holder that wakes at 3.5 s, GPU 2 a live service;
    // beside them, each of the two on an agent of its own.
    let three = SimOpener::default()
        .with_gpu(1, with(vec![dormant_holder()]))
        .with_gpu(2, with(vec![live_service()]));
    let holder_alone = SimOpener::new(with(vec![dormant_holder()]));
    let service_alone = SimOpener::new(with(vec![live_service()]));
    let agents = [
        start(&three, 3),
        start(&holder_alone, 1),
        start(&service_alone, 1),
    ];
    let seen = std::thread::scope(|scope| {
        let watching: Vec<_> = agents
            .iter()
            .zip([&three, &holder_alone, &service_alone])
            .map(|(agent, opener)| scope.spawn(|| watch(agent, opener, 5.0)))
            .collect();
        watching
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    let (of_three, holder, service) = (&seen[0], &seen[1][0], &seen[2][0]);
    alone(&of_three[0], 5.0);
    let began = filled_beside_until_it_wakes(&of_three[1]);
    let began_alone = filled_beside_until_it_wakes(holder);
    assert!(
        (began - began_alone).abs() < 0.25,
        "{began} against {began_alone} alone"
    );
    never_filled_beside(&of_three[2]);
    never_filled_beside(service);
    let [agent_three, agent_holder, agent_service] = agents;
    stop_idle(agent_three, &three, 3);
    stop_idle(agent_holder, &holder_alone, 1);
    stop_idle(agent_service, &service_alone, 1);
    // The service's requests met no kernel of ours, there as alone.
    for (opener, index) in [(&three, 2), (&service_alone, 0)] {
        let sim = opener.gpu(index).unwrap();
        let report = sim.report(sim.now());
        let requests = report.foreign[0].requests.clone().unwrap();
        assert!(requests.count > 50, "{requests:?}");
        assert_eq!(requests.met_kernel, 0, "{requests:?}");
    }
}

#[test]
fn gpus_chosen_by_index_and_uuid_carry_their_labels_into_snapshots_and_metrics() {
    let opener = SimOpener::default();
    let selector = GpuSelector::parse_flag("3,GPU-00000000-0000-0000-0000-000000000001").unwrap();
    let gpus = opener.select(4, &selector).unwrap();
    let indices: Vec<u32> = gpus.iter().map(|g| g.index).collect();
    assert_eq!(indices, [3, 1]);
    let agent = Agent::start(opener.clone(), gpus, quick(TARGET), AgentOptions::default()).unwrap();
    let held = wait_for(Duration::from_secs(5), || {
        let s = agent.snapshots();
        s.iter().all(|s| holds(s, TARGET, 3.0)).then_some(s)
    });
    let snapshots = held.unwrap_or_else(|| panic!("{:#?}", agent.snapshots()));
    let labels: Vec<(u32, &str)> = snapshots
        .iter()
        .map(|s| (s.labels.index, s.labels.uuid.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            (3, "GPU-00000000-0000-0000-0000-000000000003"),
            (1, "GPU-00000000-0000-0000-0000-000000000001")
        ]
    );
    let process = Process {
        hostname: "node-a".into(),
        start_time_seconds: None,
        pid_view: PidView::Host,
        version: "0.1.0",
        revision: "test",
        mps_client: false,
        mps_left: false,
    };
    let text = prometheus::render(&snapshots, &process);
    for (index, uuid) in labels {
        let target = text
            .lines()
            .find(|l| {
                l.starts_with("gpufill_target_percent{")
                    && l.contains(&format!("gpu=\"{index}\",UUID=\"{uuid}\""))
            })
            .unwrap_or_else(|| panic!("no target for GPU {index}: {text}"));
        assert!(target.contains("Hostname=\"node-a\""), "{target}");
        assert!(target.ends_with(" 50"), "{target}");
        let filling = format!("gpufill_state{{gpu=\"{index}\",UUID=\"{uuid}\"");
        assert!(
            text.lines().any(|l| l.starts_with(&filling)
                && l.contains("state=\"filling\"")
                && l.ends_with(" 1")),
            "{text}"
        );
    }
    assert!(
        opener.gpu(0).is_none() && opener.gpu(2).is_none(),
        "only the chosen GPUs are opened"
    );
    stop_idle(agent, &opener, 0);
    for index in [1, 3] {
        let busy = busy_in_the_next_second(&opener, index);
        assert!(busy <= Duration::from_millis(20), "GPU {index}: {busy:?}");
    }
}
