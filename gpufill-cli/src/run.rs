//! `gpufill run`: the runtime's [`Agent`] over this machine's GPUs, until SIGINT/SIGTERM
//! (or `--duration`), with SIGHUP reloads and the metrics endpoint around it.
//!
//! With `yield.mps = "auto"` it follows the MPS control daemon ([`DaemonWatch`]): when
//! one starts or stops, it leaves every GPU idle and executes itself again (the same
//! PID, arguments and environment), since the CUDA driver decides once per process
//! whether its contexts are MPS clients ([`gpufill_runtime::mps`]). The new image finds
//! the daemon, or none, as any start does.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpufill_runtime::mps::DaemonWatch;
use gpufill_runtime::{
    Agent, AgentError, AgentOptions, DayClock, Liveness, MpsChoice, Settings, down_of,
};
use tracing::{error, info, warn};

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
/// missing for `metric = "sm"`); a runtime error when the driver is missing or a
/// worker failed.
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
        ..AgentOptions::default()
    };
    let settings = config.to_settings();
    // Bound before any worker starts; a port that is taken does not stop the fill.
    let endpoint = metrics::Endpoint::bind(config.metrics.addr())?;
    let agent = Agent::on_this_machine(settings, options).map_err(startup_error)?;
    register_stop(&agent.stop_flag())?;
    let mut process = metrics::this_process(gpufill_runtime::pid_view());
    process.mps_client = agent.mps();
    endpoint.serve(agent.registry(), process)?;
    let mut mps = DaemonWatch::new(agent.mps());
    let mut restart = None;
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
        if let Some(new) = reloader.poll() {
            // Validated by the reloader, restart keys already kept; the agent checks the
            // GPUs too (a grid wider than one holds).
            if let Err(e) = agent.update(new.to_settings()) {
                error!("reload refused, old settings kept: {e}");
                metrics::RELOADS.refused();
                reloader.undo();
            }
        }
        if restart.is_none() && follows_mps(&agent.settings()) {
            restart = mps.poll(Instant::now(), gpufill_runtime::mps::daemon);
            if let Some(running) = restart {
                info!("{}", mps_change(running));
                agent.stop();
            }
        }
        thread::sleep(Duration::from_millis(200));
    }
    if restart.is_some() {
        systemd.reloading();
    } else {
        systemd.stopping();
    }
    agent.join()?;
    if restart.is_some() && !stop.load(Ordering::Relaxed) {
        info!("every GPU left idle; starting afresh");
        let e = restart_command(std::env::args_os()).exec();
        return Err(e).context("cannot execute gpufill again to follow MPS");
    }
    info!("stopped; every GPU left idle");
    Ok(())
}

/// Whether `run` follows the MPS daemon: only where `yield.mps = "auto"` leaves it to
/// the daemon ("on" and "off" are the operator's decision).
fn follows_mps(settings: &Settings) -> bool {
    settings.yielding.mps == MpsChoice::Auto
}

/// The log line of a daemon that started (`running`) or stopped.
fn mps_change(running: bool) -> String {
    let dir = gpufill_runtime::mps::pipe_directory();
    if running {
        format!(
            "MPS control daemon started ({}): restarting to become its client",
            dir.display()
        )
    } else {
        format!(
            "MPS control daemon stopped ({}): restarting without MPS; the yield policy applies again",
            dir.display()
        )
    }
}

/// This program again, with `args` (its own, `argv[0]` first): `/proc/self/exe`, the
/// image running now even if its file was replaced, under its `argv[0]`.
fn restart_command(args: impl IntoIterator<Item = OsString>) -> Command {
    let mut args = args.into_iter();
    let mut command = Command::new("/proc/self/exe");
    if let Some(zero) = args.next() {
        command.arg0(zero);
    }
    command.args(args);
    command
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

    #[test]
    fn the_restart_runs_this_image_with_the_same_arguments() {
        let args = ["gpufill", "run", "--metrics", "127.0.0.1:9401", "-v"].map(OsString::from);
        let command = restart_command(args);
        assert_eq!(command.get_program(), "/proc/self/exe");
        let got: Vec<_> = command.get_args().collect();
        assert_eq!(got, ["run", "--metrics", "127.0.0.1:9401", "-v"]);
    }

    #[test]
    fn only_auto_follows_the_daemon_and_the_log_says_which_way() {
        let mut settings = Settings::default();
        assert!(follows_mps(&settings), "auto is the default");
        settings.yielding.mps = MpsChoice::On;
        assert!(!follows_mps(&settings));
        settings.yielding.mps = MpsChoice::Off;
        assert!(!follows_mps(&settings));
        assert!(mps_change(true).contains("restarting to become its client"));
        assert!(mps_change(false).contains("the yield policy applies again"));
    }
}
