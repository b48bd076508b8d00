//! An agent on two simulated GPUs, for four seconds of wall time, with nothing but
//! `gpufill_runtime`'s `SimOpener` and `gpufill_sim`'s model: it fills both at 40 %, takes 60 % live,
//! and yields on GPU 0 alone when a foreign job arrives there. Runs anywhere (CI runs
//! it): `cargo run -p gpufill-runtime --example simulated_agent`
use std::time::{Duration, Instant};

use gpufill_runtime::{Agent, AgentOptions, DayClock, Settings, SimOpener, State, TimeOfDay};
use gpufill_sim::{ForeignJob, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opener = SimOpener::new(SimConfig::default());
    let options = AgentOptions {
        day_clock: DayClock::StartingAt(TimeOfDay::MIDNIGHT),
        duration: Some(Duration::from_secs(4)),
        ..AgentOptions::default()
    };
    let settings = Settings {
        target_percent: 40.0,
        ..Settings::default()
    };
    let agent = Agent::start(opener.clone(), opener.gpus(2), settings.clone(), options)?;
    let started = Instant::now();
    let (mut updated, mut job_added) = (false, false);
    let (mut filled, mut yielded) = (false, false);
    while !agent.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        let t = started.elapsed().as_secs_f64();
        if t > 1.0 && !updated {
            // A new target, live: every worker takes it at its next tick.
            agent.update(Settings {
                target_percent: 60.0,
                ..settings.clone()
            })?;
            updated = true;
        }
        if t > 2.0 && !job_added {
            // Someone starts a job on GPU 0, on the simulated GPU's own clock.
            if let Some(gpu) = opener.gpu(0) {
                let now = gpu.now().as_secs_f64();
                gpu.add_foreign(ForeignJob::compute_bound(now, now + 60.0, 0.3));
                job_added = true;
            }
        }
        for s in agent.snapshots() {
            let util = s.util_percent.map_or("-".into(), |u| format!("{u:.0} %"));
            let doing = match s.state {
                Some(State::Filling) => {
                    filled |= s.target_percent == 60.0;
                    "filling"
                }
                Some(State::Yielding) => {
                    yielded |= s.labels.index == 0;
                    "yielding"
                }
                Some(other) => other.as_str(),
                None => "starting",
            };
            println!(
                "{t:4.1} s  GPU {} {doing}: target {:.0} %, util {util}, duty {:.0} %, {} foreign",
                s.labels.index,
                s.target_percent,
                s.duty_ratio * 100.0,
                s.foreign
            );
        }
    }
    agent.join()?;
    // What CI checks: it filled at the new target, then yielded to the job on GPU 0.
    if !(filled && yielded) {
        return Err(format!(
            "expected filling at 60 % and yielding on GPU 0 (filled {filled}, yielded {yielded})"
        )
        .into());
    }
    println!("ok: filled at the target taken live, then yielded to the foreign job on GPU 0");
    Ok(())
}
