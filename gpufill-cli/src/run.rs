//! `gpufill run`: the runtime's [`Agent`] over this machine's GPUs, until SIGINT/SIGTERM
//! (or `--duration`), with SIGHUP reloads and the metrics endpoint around it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpufill_runtime::{Agent, AgentError, AgentOptions, DayClock, Liveness, down_of};
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::config::Config;
use crate::error::UsageError;
use crate::metrics;
use crate::notify::Notifier;
use crate::reload::Reloader;

/// Runs `gpufill run`.
///
/// # Errors
/// [`UsageError`] for settings the machine cannot meet (a GPU that is not there, GPM
/// missing for `metric = "sm"`, a GPU that another gpufill fills); a runtime error when
/// the driver is missing or a worker failed.
pub fn run(args: &RunArgs, config: &Config) -> anyhow::Result<()> {
    // Signals first: a SIGINT, SIGTERM or SIGHUP during NVML's start-up and the GPU
    // listing must not kill the daemon.
    let stop = Arc::new(AtomicBool::new(false));
    register_stop(&stop)?;
    let mut flags = args.flags.overrides();
    flags.gpus = args.gpus.clone();
    let mut reloader = Reloader::install(args.flags.config.clone(), flags, config.clone())?;
    let options = AgentOptions {
        day_clock: DayClock::Local,
        device_readings: config.metrics.addr().is_some(),
        duration: args.duration.map(Duration::from_secs_f64),
        // One gpufill per GPU: a second one on a GPU is refused (exit 2), naming this one.
        claim_dir: Some(gpufill_runtime::CLAIM_DIR.into()),
        ..AgentOptions::default()
    };
    let settings = config.to_settings();
    // Bound before any worker starts; a port that is taken does not stop the fill.
    let endpoint = metrics::Endpoint::bind(config.metrics.addr())?;
    let agent = Agent::on_this_machine(settings, options).map_err(startup_error)?;
    register_stop(&agent.stop_flag())?;
    let process = metrics::this_process(gpufill_runtime::pid_view());
    endpoint.serve(agent.registry(), process)?;
    let registry = agent.registry();
    let mut systemd = Notifier::from_env();
    let mut known_sick = Vec::new();
    // The main thread only forwards stops and reloads; each worker applies a reload at
    // its next tick. Reloads are rare and need no haste: a slow poll keeps this
    // thread's wake-ups (and CPU) negligible beside the workers'.
    while !agent.is_finished() {
        if stop.load(Ordering::Relaxed) {
            agent.stop();
        }
        // READY=1 once every worker has ticked; the watchdog only while all tick.
        let lives = registry.liveness(Instant::now());
        systemd.keep_alive(lives.iter().all(|(_, l)| *l == Liveness::Ticking));
        log_health_changes(&mut known_sick, down_of(lives));
        reload_step(&mut reloader, &agent);
        thread::sleep(Duration::from_millis(200));
    }
    systemd.stopping();
    agent.join()?;
    info!("stopped; every GPU left idle");
    Ok(())
}

/// Takes a reload one step ([`Reloader::propose`]): settings from a complete, valid file
/// go to the agent, and are in force (and logged as reloaded) only once it took them.
fn reload_step(reloader: &mut Reloader, agent: &Agent) {
    let Some(proposal) = reloader.propose() else {
        return;
    };
    // Validated by the reloader, restart keys already kept; the agent checks the GPUs
    // too (a grid wider than one holds).
    match agent.update(proposal.config().to_settings()) {
        Ok(_) => {
            reloader.commit(proposal);
        }
        Err(e) => reloader.refuse(proposal, e),
    }
}

/// Logs a worker that went down (stalled, ended, or no first tick within the start-up
/// allowance) and one that recovered, once each time it changes.
fn log_health_changes(known: &mut Vec<(u32, String)>, now: Vec<(u32, String)>) {
    for (gpu, why) in &now {
        if !known.iter().any(|(g, _)| g == gpu) {
            warn!(gpu, "worker unhealthy: {why}");
        }
    }
    for (gpu, _) in known.iter() {
        if !now.iter().any(|(g, _)| g == gpu) {
            info!(gpu, "worker ticking again");
        }
    }
    *known = now;
}

pub(crate) fn register_stop(flag: &Arc<AtomicBool>) -> anyhow::Result<()> {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(flag))
            .context("cannot install signal handlers")?;
    }
    Ok(())
}

/// Settings errors exit with status 2, the rest with 1.
fn startup_error(e: AgentError) -> anyhow::Error {
    if e.is_settings_error() {
        UsageError(e.into()).into()
    } else {
        e.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::logging::capture::logged;
    use gpufill_runtime::sim::SimOpener;

    /// An agent on one simulated GPU that holds 8 blocks at once, and a reloader on a
    /// file with `target_percent = 30`.
    fn agent_and_reloader() -> (tempfile::TempDir, std::path::PathBuf, Agent, Reloader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpufill.toml");
        std::fs::write(&path, "target_percent = 30\n").unwrap();
        let config = crate::reload::load(&path, &Overrides::default()).unwrap();
        let opener = SimOpener::default();
        let mut gpus = opener.gpus(1);
        gpus[0].max_resident_blocks = 8;
        let agent =
            Agent::start(opener, gpus, config.to_settings(), AgentOptions::default()).unwrap();
        let reloader = Reloader::install(Some(path.clone()), Overrides::default(), config).unwrap();
        (dir, path, agent, reloader)
    }

    #[test]
    fn a_reload_the_gpu_refuses_is_logged_as_refused_and_never_as_reloaded() {
        let (_dir, path, agent, mut reloader) = agent_and_reloader();
        std::fs::write(&path, "target_percent = 39\n[load]\nwidth_blocks = 99\n").unwrap();
        reloader.request();
        let ((), log) = logged(|| reload_step(&mut reloader, &agent));
        assert!(
            log.contains("reload refused, old settings kept: ") && log.contains("99 blocks"),
            "{log}"
        );
        assert!(!log.contains("config reloaded"), "{log}");
        assert_eq!(reloader.current().target_percent, 30.0);
        assert_eq!(agent.settings().target_percent, 30.0);
        // A file the GPU can meet: in force, then logged.
        std::fs::write(&path, "target_percent = 41\n[load]\nwidth_blocks = 8\n").unwrap();
        reloader.request();
        let ((), log) = logged(|| reload_step(&mut reloader, &agent));
        assert!(log.contains("config reloaded target=41.0"), "{log}");
        assert_eq!(reloader.current().target_percent, 41.0);
        assert_eq!(agent.settings().load.width_blocks, 8);
        agent.stop();
        agent.join().unwrap();
    }
}
