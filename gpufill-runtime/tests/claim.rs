//! One gpufill per GPU (issue 31): an agent claims its GPUs before any worker starts,
//! and a second agent on one of them is refused, naming the first, until it is gone.

mod common;

use std::time::Duration;

use gpufill_runtime::{Agent, AgentError, AgentOptions, Liveness, SimOpener, State};

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

/// Everything logged in this test binary, from every thread.
static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// Installs the subscriber that writes into [`LOG`] (once), and gives what it holds.
fn logged() -> String {
    struct Into;
    impl std::io::Write for Into {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            LOG.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| Into)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

/// Plants a FIFO at the lock path of `gpu` in `dir`: something that is not a gpufill
/// holds the GPU until it is removed.
fn plant_fifo(dir: &std::path::Path, gpu: &gpufill_runtime::Gpu) -> std::path::PathBuf {
    let path = dir.join(format!("{}.lock", gpu.uuid));
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path, which `c` owns for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    path
}

fn waiting_quickly(dir: &std::path::Path) -> AgentOptions {
    AgentOptions {
        claim_retry: Duration::from_millis(20),
        ..claiming(dir)
    }
}

#[test]
fn a_gpu_whose_lock_is_held_waits_alone_and_fills_once_the_lock_is_free() {
    logged();
    let dir = tempfile::tempdir().unwrap();
    let opener = SimOpener::default();
    let gpus = opener.gpus(2);
    let fifo = plant_fifo(dir.path(), &gpus[0]);
    let agent = Agent::start(
        opener.clone(),
        gpus,
        common::quick(40.0),
        waiting_quickly(dir.path()),
    )
    .unwrap();
    // GPU 1 fills; GPU 0 waits, not opened, its snapshot naming what holds it.
    let filling = |i: usize| agent.snapshots()[i].state == Some(State::Filling);
    assert!(common::wait_for(Duration::from_secs(5), || filling(1).then_some(())).is_some());
    // Several tries meanwhile.
    std::thread::sleep(Duration::from_millis(200));
    let held = &agent.snapshots()[0];
    assert_eq!(held.state, None);
    assert!(
        opener.gpu(0).is_none(),
        "GPU 0 was opened while its lock was held"
    );
    let words = held.waiting_for.as_deref().unwrap_or_default();
    assert!(words.contains("is a FIFO, not a regular file"), "{words}");
    let now = std::time::Instant::now();
    assert_eq!(held.liveness(now), Liveness::Waiting);
    assert_eq!(held.unhealthy(now), None, "waiting is healthy");
    // The lock is free: GPU 0 fills too, GPU 1 never restarted.
    std::fs::remove_file(&fifo).unwrap();
    assert!(common::wait_for(Duration::from_secs(5), || filling(0).then_some(())).is_some());
    let snapshots = agent.snapshots();
    assert_eq!(snapshots[0].waiting_for, None);
    assert_eq!(snapshots[1].state, Some(State::Filling));
    // A second agent on GPU 0 is now refused by this one's claim, as at any start.
    let other = SimOpener::default();
    let e = Agent::start(
        other.clone(),
        other.gpus(1),
        common::quick(40.0),
        claiming(dir.path()),
    );
    assert!(matches!(e, Err(AgentError::Claimed(ref c)) if c.by_gpufill));
    agent.stop();
    agent.join().unwrap();
    // Who held it was said once, at the first try, not at every try; and the claim once.
    let log = logged();
    let path = fifo.display().to_string();
    let said: Vec<&str> = log.lines().filter(|l| l.contains(&path)).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("is held by something that is not a gpufill")
            && said[0].contains("waiting until it is free, trying again every 0.02 s"),
        "{log}"
    );
    let claimed = log
        .lines()
        .filter(|l| l.contains("the GPU's lock is free: claimed, filling"));
    assert_eq!(claimed.count(), 1, "{log}");
}

#[test]
fn a_stop_while_a_gpu_waits_for_its_lock_ends_the_wait_and_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opener = SimOpener::default();
    let gpus = opener.gpus(1);
    plant_fifo(dir.path(), &gpus[0]);
    let options = AgentOptions {
        claim_retry: Duration::from_secs(60),
        ..claiming(dir.path())
    };
    let agent = Agent::start(opener.clone(), gpus, common::quick(40.0), options).unwrap();
    let waits = || agent.snapshots()[0].waiting_for.is_some().then_some(());
    assert!(common::wait_for(Duration::from_secs(5), waits).is_some());
    let at = std::time::Instant::now();
    agent.stop();
    agent.join().unwrap();
    assert!(
        at.elapsed() < Duration::from_secs(5),
        "the wait ended at once"
    );
    assert!(opener.gpu(0).is_none());
}
