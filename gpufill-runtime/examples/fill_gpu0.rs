//! Fill GPU 0 at 40 % and print its snapshot every second (Ctrl-C to stop).
//! `cargo run -p gpufill-runtime --example fill_gpu0`
use std::sync::atomic::Ordering;
use std::time::Duration;

use gpufill_runtime::{Agent, AgentOptions, GpuId, GpuSelector, Settings};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = Settings {
        target_percent: 40.0,
        gpus: GpuSelector::List(vec![GpuId::Index(0)]),
        ..Settings::default()
    };
    let agent = Agent::on_this_machine(settings, AgentOptions::default())?;
    let stop = agent.stop_flag();
    // Ctrl-C stops the workers, which leave the GPU idle.
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    while !stop.load(Ordering::Relaxed) && !agent.is_finished() {
        std::thread::sleep(Duration::from_secs(1));
        for s in agent.snapshots() {
            let (gpu, duty) = (s.labels.index, s.duty_ratio * 100.0);
            let state = s.state.map_or("starting", |st| st.as_str());
            println!(
                "GPU {gpu} {state}: util {:?} %, duty {duty:.0} %",
                s.util_percent
            );
        }
    }
    Ok(agent.join()?)
}
