//! One gpufill per GPU (issue 31): an agent claims its GPUs before any worker starts,
//! and a second agent on one of them is refused, naming the first, until it is gone.

mod common;

use std::time::Duration;

use gpufill_runtime::{Agent, AgentError, AgentOptions, SimOpener, State};

fn claiming(dir: &std::path::Path) -> AgentOptions {
    AgentOptions {
        claim_dir: Some(dir.to_path_buf()),
        ..AgentOptions::default()
    }
}

#[test]
fn a_second_agent_on_a_claimed_gpu_is_refused_before_it_starts_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let first_opener = SimOpener::default();
    let first = Agent::start(
        first_opener.clone(),
        first_opener.gpus(2),
        common::quick(40.0),
        claiming(dir.path()),
    )
    .unwrap();
    // GPU 1 of the same machine: refused, a settings error (exit 2 in the binary).
    let second_opener = SimOpener::default();
    let gpus = second_opener.select(2, &"1".parse().unwrap()).unwrap();
    let e = Agent::start(
        second_opener.clone(),
        gpus,
        common::quick(40.0),
        claiming(dir.path()),
    )
    .err()
    .expect("refused");
    assert!(matches!(e, AgentError::Claimed(_)), "{e}");
    assert!(e.is_settings_error());
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "GPU 1 (GPU-00000000-0000-0000-0000-000000000001) is already filled by another \
             gpufill: pid {} on host ",
            std::process::id()
        )),
        "{text}"
    );
    assert!(second_opener.gpu(1).is_none(), "no worker opened the GPU");
    // The first fills on; once it is gone, the GPUs are free again.
    let filling = common::wait_for(Duration::from_secs(5), || {
        first
            .snapshots()
            .iter()
            .all(|s| s.state == Some(State::Filling))
            .then_some(())
    });
    assert!(filling.is_some());
    first.stop();
    first.join().unwrap();
    let third = Agent::start(
        second_opener.clone(),
        second_opener.gpus(2),
        common::quick(40.0),
        claiming(dir.path()),
    )
    .unwrap();
    third.stop();
    third.join().unwrap();
}

#[test]
fn without_a_claim_directory_agents_claim_nothing() {
    // Off by default: an embedder's agents claim nothing unless asked to (as root, a
    // default directory would let the second agent below be refused).
    assert!(gpufill_runtime::AgentOptions::default().claim_dir.is_none());
    let opener = SimOpener::default();
    let a = common::started(&opener, 1, 40.0);
    let other = SimOpener::default();
    let b = common::started(&other, 1, 40.0);
    for agent in [a, b] {
        agent.stop();
        agent.join().unwrap();
    }
}
