//! Fill GPU 0 at 40 % and print its snapshot every second (Ctrl-C to stop).
//! `cargo run -p gpufill-runtime --example fill_gpu0`
use std::error::Error;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gpufill_runtime::{Agent, AgentOptions, GpuId, GpuSelector, Settings};

fn main() -> ExitCode {
    match fill() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn fill() -> Result<(), Box<dyn Error>> {
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

/// The error in words (its `Display`, which names its causes), as the `gpufill` binary
/// prints errors; `main() -> Result` would print its `Debug` form, e.g. `NoDriver`.
fn report(err: &dyn Error) -> String {
    format!("fill_gpu0: {err}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufill_runtime::{AgentError, OpenError};

    #[test]
    fn a_missing_driver_is_reported_in_words() {
        let text = report(&AgentError::from(OpenError::NoDriver));
        assert_eq!(text, format!("fill_gpu0: {}", OpenError::NoDriver));
        assert!(text.contains("no NVIDIA driver"), "{text}");
        assert!(!text.contains("NoDriver"), "{text}");
    }

    #[test]
    fn without_a_driver_fill_fails_saying_so() {
        if gpufill_cuda::driver_present() {
            eprintln!(
                "skipped: this machine has the NVIDIA driver, and the example would fill GPU 0"
            );
            return;
        }
        let err = fill().unwrap_err();
        assert_eq!(
            report(err.as_ref()),
            format!("fill_gpu0: {}", OpenError::NoDriver)
        );
    }
}
