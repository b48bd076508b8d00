//! The agent over simulated GPUs: what it checks before it starts and on every update.

#![cfg(feature = "sim")]

use gpufill_runtime::sim::SimOpener;
use gpufill_runtime::{Agent, AgentOptions, Gpu, Metric, Settings};

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
