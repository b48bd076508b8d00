//! The same agent as `fill_gpu0`, on two simulated GPUs, for three seconds of wall
//! time: a foreign job arrives on each after one second and gpufill yields to it.
//! Runs anywhere (CI runs it): `cargo run -p gpufill-runtime --features sim --example simulated_agent`
use std::time::Duration;

use gpufill_core::State;
use gpufill_core::sim::{ForeignJob, SimConfig};
use gpufill_runtime::sim::SimOpener;
use gpufill_runtime::{Agent, AgentOptions, DayClock, Settings};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opener = SimOpener {
        config: SimConfig {
            foreign: vec![ForeignJob::compute_bound(1.0, 60.0, 0.3)],
            ..SimConfig::default()
        },
    };
    let gpus = opener.gpus(2);
    let options = AgentOptions {
        day_clock: DayClock::StartingAt(gpufill_core::TimeOfDay::MIDNIGHT),
        duration: Some(Duration::from_secs(3)),
        ..AgentOptions::default()
    };
    let settings = Settings {
        target_percent: 40.0,
        ..Settings::default()
    };
    let agent = Agent::start(opener, gpus, settings, options)?;
    let mut states = Vec::new();
    while !agent.is_finished() {
        std::thread::sleep(Duration::from_millis(500));
        for s in agent.snapshots() {
            let util = s.util_percent.map_or("-".into(), |u| format!("{u:.0} %"));
            println!(
                "GPU {} {:?}: util {util}, duty {:.0} %, {} foreign",
                s.labels.index,
                s.state,
                s.duty_ratio * 100.0,
                s.foreign
            );
            states.push(s.state);
        }
    }
    agent.join()?;
    // What CI checks: it filled, then yielded to the job.
    let filled = states.contains(&Some(State::Filling));
    let yielded = states.contains(&Some(State::Yielding));
    if !(filled && yielded) {
        return Err(format!("expected filling then yielding, saw {states:?}").into());
    }
    println!("ok: filled, then yielded to the foreign job");
    Ok(())
}
