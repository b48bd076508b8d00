//! `gpufill run`: the runtime's [`Agent`] over this machine's GPUs, until SIGINT/SIGTERM
//! (or `--duration`), with SIGHUP reloads and the metrics endpoint around it.
//!
//! With `yield.mps = "auto"` it follows the MPS control daemon ([`DaemonWatch`]): when
//! one starts or stops, it leaves every GPU idle and executes itself again (the same
//! PID, arguments and environment), since the CUDA driver decides once per process
//! whether its contexts are MPS clients ([`gpufill_runtime::mps`]). The new image finds
//! the daemon, or none, as any start does, and claims its GPUs afresh
//! ([`gpufill_runtime::claim_all`]): the old image's claims are released before the
//! exec, so its own lock never refuses it.
//!
//! It leaves a daemon that was told to quit (its clients keep it waiting), or whose
//! server died twice within a minute, the same way, running again without MPS
//! ([`gpufill_runtime::mps::Restart`]); and starts afresh as a client when its MPS server died once. A worker
//! that does not stop within `RESTART_WAIT` (a CUDA call that its dead server never
//! answers) does not hold that up: the exec ends it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpufill_runtime::mps::{Change, DaemonWatch, Restart};
use gpufill_runtime::{
    Agent, AgentError, AgentOptions, DayClock, Liveness, LivenessWatch, MpsChoice, Settings,
    down_of,
};
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
    run_with(
        args,
        config,
        Path::new(gpufill_runtime::CLAIM_DIR),
        Agent::on_this_machine,
    )
}

/// [`run`], claiming the GPUs in `claim_dir` and starting the agent with `start` (this
/// machine's GPUs, or simulated ones in tests).
fn run_with(
    args: &RunArgs,
    config: &Config,
    claim_dir: &Path,
    start: impl Fn(Settings, AgentOptions) -> Result<Agent, AgentError>,
) -> anyhow::Result<()> {
    // A daemon that is quitting is left before any CUDA call can join it.
    if follows_mps(&config.to_settings())
        && let Some(plan) = gpufill_runtime::mps::leave_at_start()
    {
        info!("{}", plan.message);
        let e = restart_command(std::env::args_os(), &plan.env).exec();
        return Err(e).context("cannot execute gpufill again to leave MPS");
    }
    // Signals first: a SIGINT, SIGTERM or SIGHUP during NVML's start-up and the GPU
    // listing must not kill the daemon.
    let stop = Arc::new(AtomicBool::new(false));
    register_stop(&stop)?;
    let flags = args.overrides();
    let mut reloader = Reloader::install(args.flags.config.clone(), flags, config.clone())?;
    let options = AgentOptions {
        day_clock: DayClock::Local,
        device_readings: config.metrics.addr().is_some(),
        duration: args.duration.map(Duration::from_secs_f64),
        // One gpufill per GPU: a second one on a GPU is refused (exit 2), naming this one.
        claim_dir: Some(claim_dir.into()),
        ..AgentOptions::default()
    };
    let settings = config.to_settings();
    let mut systemd = Notifier::from_env();
    // The GPUs are claimed before the metrics port is bound: a second gpufill is refused
    // naming the first, whichever port it asks for, and never holds a port meanwhile. A
    // GPU whose lock something other than a gpufill holds waits for it in its worker,
    // while the others fill; the start, and its log, happen once.
    let agent = start(settings, options).map_err(startup_error)?;
    register_stop(&agent.stop_flag())?;
    // A port that is taken does not stop the fill (the endpoint keeps trying); any
    // other failure to bind stops it, leaving every GPU idle.
    let endpoint = match metrics::Endpoint::bind(config.metrics.addr()) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            agent.stop();
            let _ = agent.join();
            return Err(e);
        }
    };
    let mut process = metrics::this_process(gpufill_runtime::pid_view());
    process.mps_client = agent.mps();
    endpoint.serve(agent.registry(), process)?;
    let mut mps = match gpufill_runtime::mps::left() {
        Some(left) => DaemonWatch::having_left(left.daemon),
        None => DaemonWatch::new(agent.mps()),
    };
    let mut restart: Option<(Restart, Instant)> = None;
    let registry = agent.registry();
    let mut known_sick = Vec::new();
    let mut health = LivenessWatch::new(POLL);
    // The main thread only forwards stops and reloads; each worker applies a reload at
    // its next tick. Reloads are rare and need no haste: a slow poll keeps this
    // thread's wake-ups (and CPU) negligible beside the workers'.
    while !agent.is_finished() {
        if stop.load(Ordering::Relaxed) {
            agent.stop();
        }
        // READY=1 once every worker has ticked; the watchdog only while all tick. A GPU
        // waiting for its lock is no failed start: waiting is what it should do.
        let lives = health.look(Instant::now(), &registry.snapshots());
        systemd.keep_alive(
            lives
                .iter()
                .all(|(_, l)| matches!(l, Liveness::Ticking | Liveness::Waiting)),
        );
        log_health_changes(&mut known_sick, down_of(lives));
        reload_step(&mut reloader, &agent);
        if restart.is_none()
            && follows_mps(&agent.settings())
            && let Some(change) = mps.poll(Instant::now(), gpufill_runtime::mps::look)
        {
            restart = Some(restart_plan(change));
            agent.stop();
        }
        if let Some((_, since)) = &restart
            && since.elapsed() > RESTART_WAIT
        {
            warn!(
                "a worker did not stop within {} s (a CUDA call its MPS server will not \
                     answer?): starting afresh anyway",
                RESTART_WAIT.as_secs()
            );
            // The exec ends every thread; the lock files close with it (close-on-exec).
            let env = restart.map(|(plan, _)| plan.env).unwrap_or_default();
            systemd.reloading();
            let e = restart_command(std::env::args_os(), &env).exec();
            return Err(e).context("cannot execute gpufill again to follow MPS");
        }
        thread::sleep(POLL);
    }
    if restart.is_some() {
        systemd.reloading();
    } else {
        systemd.stopping();
    }
    // `join` consumes the agent: its GPU claims (the lock files' descriptors) are
    // released here, before any exec, so the new image claims the GPUs as any start
    // does and is not refused by this image's lock. (The descriptors are close-on-exec
    // besides, so an exec could never carry a lock over by mistake.)
    let joined = agent.join();
    if let Some((plan, _)) = restart.filter(|_| !stop.load(Ordering::Relaxed)) {
        // A worker that failed on its way out (its MPS server gone) is no reason to stay.
        if let Err(e) = joined {
            warn!("{e}");
        }
        info!("every GPU left idle; starting afresh");
        let e = restart_command(std::env::args_os(), &plan.env).exec();
        return Err(e).context("cannot execute gpufill again to follow MPS");
    }
    joined?;
    info!("stopped; every GPU left idle");
    Ok(())
}

/// Whether `run` follows the MPS daemon: only where `yield.mps = "auto"` leaves it to
/// the daemon ("on" and "off" are the operator's decision).
fn follows_mps(settings: &Settings) -> bool {
    settings.yielding.mps == MpsChoice::Auto
}

/// How long the main loop sleeps between two looks at the workers.
const POLL: Duration = Duration::from_millis(200);

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

/// How long a fresh start to follow MPS waits for the workers to stop before it goes
/// ahead without them.
const RESTART_WAIT: Duration = Duration::from_secs(4);

/// The plan for `change` (logged now), and when it was made.
fn restart_plan(change: Change) -> (Restart, Instant) {
    let plan = Restart::for_this_process(change);
    match change {
        Change::Quitting(_) | Change::ServerLost(_) => warn!("{}", plan.message),
        Change::Started | Change::Stopped => info!("{}", plan.message),
    }
    (plan, Instant::now())
}

/// This program again, with `args` (its own, `argv[0]` first) and its environment
/// changed as `env` says: `/proc/self/exe`, the image running now even if its file was
/// replaced, under its `argv[0]`.
fn restart_command(
    args: impl IntoIterator<Item = OsString>,
    env: &[(&'static str, Option<OsString>)],
) -> Command {
    let mut args = args.into_iter();
    let mut command = Command::new("/proc/self/exe");
    if let Some(zero) = args.next() {
        command.arg0(zero);
    }
    command.args(args);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
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
    use crate::config::Overrides;
    use crate::logging::capture::logged;
    use gpufill_runtime::SimOpener;
    use gpufill_runtime::reload::ReloadStatus;
    use std::path::PathBuf;

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
        let (_dir, path, agent, reloader) = agent_and_reloader();
        let status: &'static ReloadStatus = Box::leak(Box::new(ReloadStatus::new()));
        let mut reloader = reloader.recording_to(status);
        let successful = || {
            let text = status.render();
            let line = text
                .lines()
                .find(|l| l.starts_with("gpufill_config_last_reload_successful "))
                .map(str::to_owned);
            (
                line,
                text.contains("\ngpufill_config_last_reload_success_timestamp_seconds "),
            )
        };
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
        // The file was valid, but the agent refused it: the metric says refused.
        let refused = Some("gpufill_config_last_reload_successful 0".to_owned());
        assert_eq!(successful(), (refused.clone(), false));
        // A file the GPU can meet: proposed, but nothing recorded until it is committed.
        std::fs::write(&path, "target_percent = 41\n[load]\nwidth_blocks = 8\n").unwrap();
        reloader.request();
        let proposal = loop {
            if let Some(p) = reloader.propose() {
                break p;
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(successful(), (refused, false));
        agent.update(proposal.config().to_settings()).unwrap();
        let ((), log) = logged(|| {
            reloader.commit(proposal);
        });
        assert!(log.contains("config reloaded target=41.0"), "{log}");
        assert_eq!(
            successful(),
            (
                Some("gpufill_config_last_reload_successful 1".to_owned()),
                true
            )
        );
        assert_eq!(reloader.current().target_percent, 41.0);
        assert_eq!(agent.settings().load.width_blocks, 8);
        agent.stop();
        agent.join().unwrap();
    }

    #[test]
    fn the_restart_runs_this_image_with_the_same_arguments() {
        let args = ["gpufill", "run", "--metrics", "127.0.0.1:9401", "-v"].map(OsString::from);
        let env = [("A", Some(OsString::from("1"))), ("B", None)];
        let command = restart_command(args, &env);
        assert_eq!(command.get_program(), "/proc/self/exe");
        let got: Vec<_> = command.get_args().collect();
        assert_eq!(got, ["run", "--metrics", "127.0.0.1:9401", "-v"]);
        let envs: Vec<_> = command.get_envs().collect();
        assert_eq!(
            envs,
            [
                (std::ffi::OsStr::new("A"), Some(std::ffi::OsStr::new("1"))),
                (std::ffi::OsStr::new("B"), None)
            ]
        );
    }

    #[test]
    fn only_auto_follows_the_daemon() {
        let mut settings = Settings::default();
        assert!(follows_mps(&settings), "auto is the default");
        settings.yielding.mps = MpsChoice::On;
        assert!(!follows_mps(&settings));
        settings.yielding.mps = MpsChoice::Off;
        assert!(!follows_mps(&settings));
    }

    /// `gpufill run ARGS` as parsed and resolved from the command line.
    fn run_args(args: &[&str]) -> (RunArgs, Config) {
        use clap::Parser;
        let line = ["gpufill", "run"].iter().chain(args);
        let crate::cli::Command::Run(args) = crate::cli::Cli::try_parse_from(line).unwrap().command
        else {
            unreachable!("run parses as run")
        };
        let config = crate::resolve_config(None, &args.overrides()).unwrap();
        (args, config)
    }

    /// Starts an agent on one simulated GPU (the same UUID every time).
    fn simulated(settings: Settings, options: AgentOptions) -> Result<Agent, AgentError> {
        let opener = SimOpener::default();
        Agent::start(opener.clone(), opener.gpus(1), settings, options)
    }

    #[test]
    fn a_second_instance_names_the_first_whichever_port_it_asks_for() {
        let dir = tempfile::tempdir().unwrap();
        let claiming = AgentOptions {
            claim_dir: Some(dir.path().into()),
            ..AgentOptions::default()
        };
        let first = simulated(Settings::default(), claiming).unwrap();
        // The first one's metrics port, and a free one.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = taken.local_addr().unwrap().to_string();
        for port in [taken.as_str(), "127.0.0.1:0"] {
            let (args, config) = run_args(&["--metrics", port]);
            let (result, log) = logged(|| run_with(&args, &config, dir.path(), simulated));
            let e = result.unwrap_err();
            assert!(e.is::<UsageError>(), "{port}: exit 2: {e:#}");
            let text = format!("{e:#}");
            assert!(
                text.contains(&format!(
                    "is already filled by another gpufill: pid {} ",
                    std::process::id()
                )),
                "{port}: {text}"
            );
            // Refused before it bound anything: no port taken, no complaint about one.
            assert!(!log.contains("metrics"), "{port}: {log}");
        }
        first.stop();
        first.join().unwrap();
    }

    /// Plants a FIFO at GPU 0's lock path in `dir`: something that is not a gpufill
    /// holds the GPU until it is removed.
    fn plant_fifo(dir: &std::path::Path) -> PathBuf {
        let uuid = SimOpener::default().gpus(1)[0].uuid.clone();
        let path = dir.join(format!("{uuid}.lock"));
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path, which `c` owns for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        path
    }

    #[test]
    fn a_held_gpu_waits_beside_the_filled_one_and_the_start_happens_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = plant_fifo(dir.path());
        let opener = SimOpener::default();
        let starts = std::sync::atomic::AtomicUsize::new(0);
        let start = |settings, options| {
            starts.fetch_add(1, Ordering::Relaxed);
            let quickly = AgentOptions {
                claim_retry: Duration::from_millis(20),
                ..options
            };
            Agent::start(opener.clone(), opener.gpus(2), settings, quickly)
        };
        // GPU 1 is opened, GPU 0 not, until the FIFO at its lock's path is gone.
        let watcher = {
            let opener = opener.clone();
            thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(10);
                while opener.gpu(1).is_none() && Instant::now() < until {
                    thread::sleep(Duration::from_millis(10));
                }
                thread::sleep(Duration::from_millis(200));
                let alone = opener.gpu(1).is_some() && opener.gpu(0).is_none();
                std::fs::remove_file(&fifo).unwrap();
                alone
            })
        };
        let (args, config) = run_args(&["--duration", "3"]);
        let (result, log) = logged(|| run_with(&args, &config, dir.path(), start));
        result.unwrap();
        assert!(watcher.join().unwrap(), "GPU 1 filled while GPU 0 waited");
        assert!(
            opener.gpu(0).is_some(),
            "GPU 0 filled once its lock was free"
        );
        // One start: nothing of it was logged again while GPU 0 waited.
        assert_eq!(starts.load(Ordering::Relaxed), 1);
        assert_eq!(
            log.matches("stopped; every GPU left idle").count(),
            1,
            "{log}"
        );
    }

    #[test]
    fn a_gpu_another_gpufill_holds_refuses_the_start_though_others_are_free() {
        let dir = tempfile::tempdir().unwrap();
        let claiming = AgentOptions {
            claim_dir: Some(dir.path().into()),
            ..AgentOptions::default()
        };
        let first = simulated(Settings::default(), claiming).unwrap();
        let opener = SimOpener::default();
        let both =
            |settings, options| Agent::start(opener.clone(), opener.gpus(2), settings, options);
        let (args, config) = run_args(&[]);
        let e = run_with(&args, &config, dir.path(), both).unwrap_err();
        assert!(e.is::<UsageError>(), "exit 2: {e:#}");
        assert!(
            format!("{e:#}").contains("is already filled by another gpufill"),
            "{e:#}"
        );
        assert!(opener.gpu(1).is_none(), "nothing filled");
        first.stop();
        first.join().unwrap();
    }

    /// What the copy of this test binary that [`a_re_executed_image_claims_the_gpu_its_old_image_held`]
    /// starts does: an agent on a simulated GPU claims it in `GPUFILL_TEST_EXEC_DIR`,
    /// stops and, as `run` does, is joined (`join`) or, to show that the exec alone lets
    /// go of the lock, forgotten with its claim still open (`forget`); then the image
    /// executes itself again ([`restart_command`], as `run` does to follow MPS). The new
    /// image (`after`) claims the GPU anew, under the same PID, and says so.
    fn exec_phase(phase: &str, dir: PathBuf) {
        let claiming = || AgentOptions {
            claim_dir: Some(dir.clone()),
            ..AgentOptions::default()
        };
        let start = || {
            let opener = SimOpener::default();
            Agent::start(
                opener.clone(),
                opener.gpus(1),
                Settings::default(),
                claiming(),
            )
        };
        let agent = start().unwrap_or_else(|e| panic!("{phase}: claim refused: {e}"));
        if phase == "after" {
            agent.stop();
            agent.join().unwrap();
            println!("claimed again by pid {}", std::process::id());
            return;
        }
        let refused = start()
            .err()
            .expect("a second claim while the first is held");
        assert!(matches!(refused, AgentError::Claimed(_)), "{refused}");
        agent.stop();
        if phase == "join" {
            agent.join().unwrap();
        } else {
            std::mem::forget(agent);
        }
        let e = restart_command(std::env::args_os(), &[])
            .env(EXEC_PHASE, "after")
            .exec();
        panic!("cannot execute again: {e}");
    }

    const EXEC_PHASE: &str = "GPUFILL_TEST_EXEC_PHASE";

    #[test]
    fn a_re_executed_image_claims_the_gpu_its_old_image_held() {
        const DIR: &str = "GPUFILL_TEST_EXEC_DIR";
        if let Ok(phase) = std::env::var(EXEC_PHASE) {
            let dir = std::env::var_os(DIR).expect("the claim directory");
            return exec_phase(&phase, dir.into());
        }
        for phase in ["join", "forget"] {
            let dir = tempfile::tempdir().unwrap();
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "run::tests::a_re_executed_image_claims_the_gpu_its_old_image_held",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(EXEC_PHASE, phase)
                .env(DIR, dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(&format!("claimed again by pid {pid}\n")),
                "{phase}: {out:?}"
            );
        }
    }
}
