//! `gpufill run`: one worker thread per selected GPU, each running the fill loop on the
//! real clock until SIGINT/SIGTERM (or `--duration`), then leaving its GPU idle.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use gpufill_core::device::Reopening;
use gpufill_core::{
    Clock, Controller, Event, FillLoop, FillSettings, State, Supervisor, SystemClock, Tick, Time,
    YieldPolicy,
};
use gpufill_cuda::{CudaLoad, LauncherSettings};
use gpufill_nvml::{MetricProbe, Nvml, NvmlProbe, identify_own_context};
use tracing::{debug, error, info, info_span, trace, warn};

use crate::cli::RunArgs;
use crate::config::{Config, GpuSelector, MetricChoice};
use crate::faultlog::FaultLog;
use crate::live::{DayClock, Live};
use crate::metrics::{self, GpuLabels};
use crate::reload::Reloader;

/// A GPU chosen to fill, known to both NVML and CUDA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// NVML index (what `nvidia-smi` shows).
    pub index: u32,
    /// UUID, which matches NVML and CUDA devices.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// CUDA ordinal (may differ from the NVML index).
    pub ordinal: usize,
    /// Streaming multiprocessors, from the CUDA device attribute: the widest kernel
    /// the `sm` metric uses.
    pub sm_count: u32,
}

impl Target {
    /// The labels of this GPU's metrics.
    pub fn labels(&self) -> GpuLabels {
        GpuLabels {
            index: self.index,
            uuid: self.uuid.clone(),
            model: self.name.clone(),
        }
    }
}

/// The message for a machine without the NVIDIA driver.
pub const NO_DRIVER: &str = "no NVIDIA driver: libcuda.so.1 was not found (install the NVIDIA driver; `gpufill simulate` runs without one)";

/// Runs `gpufill run`.
///
/// # Errors
/// [`crate::UsageError`] for a GPU selection that names no GPU; a runtime error when the driver
/// is missing or every worker failed.
pub fn run(args: &RunArgs, config: &Config) -> anyhow::Result<()> {
    if !gpufill_cuda::driver_present() {
        bail!(NO_DRIVER);
    }
    let nvml = Nvml::init().context("cannot start NVML")?;
    let targets = select(&nvml, &config.gpus)?;
    if config.metric == MetricChoice::Sm {
        crate::sm::check_targets(nvml, &targets)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install signal handlers")?;
    }
    let mps = mps_daemon_running();
    if mps {
        info!("MPS control daemon found");
    }
    let clock = SystemClock::new();
    let deadline = args.duration.map(Time::from_secs_f64);
    let labels = targets.iter().map(Target::labels).collect();
    let publishers = metrics::start_endpoint(config.metrics.addr(), labels)?;
    let mut flags = args.flags.overrides();
    flags.gpus = args.gpus.clone();
    let mut reloader = Reloader::install(args.flags.config.clone(), flags, config.clone())?;
    let mut senders = Vec::new();
    let workers: Vec<_> = targets
        .into_iter()
        .zip(publishers)
        .map(|(target, publisher)| {
            let (config, stop) = (config.clone(), Arc::clone(&stop));
            let (tx, rx) = crossbeam_channel::unbounded();
            senders.push(tx);
            let live = Live::new(&config, mps, DayClock::Local)
                .with_updates(rx)
                .with_publisher(
                    publisher.map(|p| p.measuring_sm_activity(config.metric == MetricChoice::Sm)),
                );
            let index = target.index;
            thread::Builder::new()
                .name(format!("gpufill-gpu{index}"))
                .spawn(move || worker(nvml, &target, &config, live, &stop, clock, deadline))
                .map(|handle| (index, handle))
        })
        .collect::<Result<_, _>>()
        .context("cannot start a worker thread")?;
    // The main thread only forwards reloads; each worker applies them at its next tick.
    while !workers.iter().all(|(_, handle)| handle.is_finished()) {
        if let Some(new) = reloader.poll() {
            for tx in &senders {
                // A worker that has ended has dropped its receiver: nothing to update.
                let _ = tx.send(Arc::clone(&new));
            }
        }
        // Reloads are rare and need no haste: a slow poll keeps this thread's wake-ups
        // (and CPU) negligible beside the workers'.
        thread::sleep(Duration::from_millis(200));
    }
    let total = workers.len();
    let mut failed = 0;
    for (index, handle) in workers {
        let result = handle
            .join()
            .unwrap_or_else(|_| Err(anyhow!("worker panicked")));
        if let Err(e) = result {
            error!(gpu = index, "{e:#}");
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} of {total} GPU workers failed (see the log above)");
    }
    info!("stopped; every GPU left idle");
    Ok(())
}

/// Resolves the GPU selector against NVML's list, then finds each GPU's CUDA ordinal by UUID.
pub(crate) fn select(nvml: &Nvml, selector: &GpuSelector) -> anyhow::Result<Vec<Target>> {
    let gpus = nvml.gpus().context("cannot list GPUs through NVML")?;
    let cuda = gpufill_cuda::devices().context("cannot list GPUs through CUDA")?;
    let selection = crate::select::choose(&gpus, selector)?;
    for g in &selection.skipped_mig {
        warn!(gpu = g.index, uuid = %g.uuid, "skipping: MIG is enabled, NVML cannot measure its utilization");
    }
    let chosen = selection.chosen;
    chosen
        .into_iter()
        .map(|g| {
            let device = cuda
                .iter()
                .find(|c| c.uuid.eq_ignore_ascii_case(&g.uuid))
                .ok_or_else(|| {
                    anyhow!(
                        "GPU {} ({}) is not visible to CUDA (check CUDA_VISIBLE_DEVICES)",
                        g.index,
                        g.uuid
                    )
                })?;
            Ok(Target {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                ordinal: device.ordinal,
                sm_count: device.sm_count,
            })
        })
        .collect()
}

/// Whether an MPS control daemon runs: its control pipe exists in
/// `$CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`), where CUDA clients look for it.
pub fn mps_daemon_running() -> bool {
    let dir =
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|| "/tmp/nvidia-mps".into());
    mps_control_pipe_in(std::path::Path::new(&dir))
}

/// Whether `dir` holds an MPS control pipe.
pub fn mps_control_pipe_in(dir: &std::path::Path) -> bool {
    dir.join("control").exists()
}

fn worker(
    nvml: Nvml,
    target: &Target,
    config: &Config,
    live: Live,
    stop: &AtomicBool,
    clock: SystemClock,
    deadline: Option<Time>,
) -> anyhow::Result<()> {
    let span = info_span!("gpu", gpu = target.index);
    let _entered = span.enter();
    // A GPU that cannot be opened at start is an error; one lost later is reopened
    // with backoff by the supervisor (docs/faults.md), leaving other GPUs alone.
    let mps = live.mps();
    let first = open_loop(nvml, target, config, mps)?;
    // Shared by the step (schedule, reloads, metrics) and the reopening, which builds
    // the new loop from the last reloaded settings; never borrowed by both at once.
    let live = RefCell::new(live);
    let reopen = |_now: Time| {
        info!("reopening the GPU");
        let reloaded = live.borrow().reloaded();
        open_loop(nvml, target, reloaded.as_deref().unwrap_or(config), mps)
            .map_err(|e| format!("{e:#}"))
    };
    let mut supervisor = Supervisor::new(first, reopen, config.retry_settings());
    let mut faults = FaultLog::default();
    // NVML's process list and power reading cost CPU: `drive` reads them once a second,
    // and only with a metrics endpoint.
    let device = |probe: &MetricProbe| {
        let memory = probe.own_memory_bytes().ok().flatten();
        (memory, probe.power_watts().ok())
    };
    let last = supervisor.run_with(
        &clock,
        config.tick(),
        |fill, now| live.borrow_mut().step(fill, now, device),
        |step| {
            log_tick(&step.tick, &mut faults);
            faults.log(step);
            !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| step.tick.at < d)
        },
    );
    let stopping = clock.now();
    let quiet = supervisor
        .fill()
        .and_then(|fill| fill.load_source().current())
        .is_none_or(|load| load.quiesce(Duration::from_millis(100)));
    if quiet {
        let ms = (clock.now() - stopping).as_secs_f64() * 1e3;
        info!(ms, "GPU idle: no kernel of ours queued or running");
    } else {
        warn!("kernels still queued 100 ms after stopping");
    }
    if last.tick.state == State::Stopped {
        bail!("stopped filling: the GPU failed and was not reopened (see the log above)");
    }
    Ok(())
}

/// The load source `run` and `bench` fill with: the CUDA launcher, reopened on resume
/// after a context release.
pub(crate) type RealLoad =
    Reopening<CudaLoad, Box<dyn FnMut() -> Result<CudaLoad, gpufill_cuda::CudaError> + Send>>;

/// The fill loop over one real GPU, as `run` builds it.
pub(crate) type RealLoop = FillLoop<MetricProbe, RealLoad, Box<dyn Controller + Send>>;

/// Opens `target`'s CUDA context and NVML probe and builds its fill loop from `config`.
pub(crate) fn open_loop(
    nvml: Nvml,
    target: &Target,
    config: &Config,
    mps: bool,
) -> anyhow::Result<RealLoop> {
    let launcher = LauncherSettings {
        period: config.period(),
        max_kernel: config.max_kernel(),
        kernel: crate::sm::spin_kernel(config.load.kernel),
        ..LauncherSettings::default()
    };
    // Issue 14: our own entry is our PID where NVML lists it (driver 580 translates PIDs
    // into our namespace); else the PIDs that appear with our context, re-checked while
    // running. Inside a PID namespace of our own the probe also reads device memory.
    let view = gpufill_nvml::pid_view();
    let before = nvml.snapshot(&target.uuid)?;
    let load = CudaLoad::open(target.ordinal, launcher).context("cannot open the CUDA context")?;
    let after = nvml.snapshot(&target.uuid)?;
    let own = identify_own_context(&before, &after, std::process::id());
    if own.ambiguous {
        warn!(pids = ?own.pids, "several processes appeared with our context; treating all as ours until their memory or work tells them apart");
    }
    let context_mib = own.context_bytes.map(|b| b >> 20);
    info!(name = %target.name, uuid = %target.uuid, own = ?own.pids, ?context_mib, pid_view = view.as_str(), "context ready");
    let probe = NvmlProbe::new(nvml, &target.uuid, own)?.with_pid_view(view);
    let probe = match config.metric {
        MetricChoice::Util => MetricProbe::utilization(probe),
        MetricChoice::Sm => {
            info!(sm_count = target.sm_count, "holding GPM SM utilization");
            MetricProbe::sm_activity(probe).context("cannot read GPM")?
        }
    };
    // With yield.release_context the context is dropped while yielding and opened again
    // on resume; our host PID stays the same, so `own` stays right.
    let ordinal = target.ordinal;
    let reopen: Box<dyn FnMut() -> _ + Send> = Box::new(move || {
        info!("opening a new CUDA context");
        CudaLoad::open(ordinal, launcher)
    });
    Ok(FillLoop::new(
        probe,
        Reopening::new(load, reopen),
        config.controller_kind().build(),
        YieldPolicy::new(config.yield_settings_with(mps)),
        FillSettings {
            shaping: config.metric.shaping(target.sm_count, config.load.kernel),
            ..config.fill_settings()
        },
    ))
}

fn log_tick(tick: &Tick, faults: &mut FaultLog) {
    let util = tick.util.map(|u| u.percent());
    if let Some(sample) = tick.sample {
        debug!(
            util = sample.percent(),
            target = tick.target.percent(),
            duty = tick.duty.percent(),
            width = tick.width.get(),
            state = tick.state.as_str(),
            foreign = tick.foreign,
            "sample"
        );
    } else {
        trace!(
            ?util,
            duty = tick.duty.percent(),
            state = tick.state.as_str(),
            "tick"
        );
    }
    for event in tick.events.iter().filter(|e| faults.admit(tick.at, e)) {
        match event {
            Event::Filling => info!(target = tick.target.percent(), "filling"),
            Event::Yielded {
                pids,
                unlisted: false,
            } if pids.is_empty() => info!("yielding (grace)"),
            Event::Yielded {
                pids,
                unlisted: false,
            } => info!(foreign = ?pids, "yielding"),
            // Issue 14: a process outside our PID namespace, seen by device memory,
            // per-process samples or utilization beyond ours.
            Event::Yielded {
                pids,
                unlisted: true,
            } => info!(
                foreign = ?pids,
                "yielding to a process our PID namespace does not list (seen by device memory or its work)"
            ),
            Event::ProbeFault { message } => {
                warn!("probe failed, holding the last load: {message}")
            }
            Event::ProbeRecovered => info!("probe recovered"),
            Event::WentBlind => warn!("probe failing too long: idle until it recovers"),
            Event::Released => {
                info!("yielded long enough: CUDA context released, no GPU memory held")
            }
            Event::LoadFault { message } => warn!("cannot apply the load, retrying: {message}"),
            Event::Stopped { kind, message } => {
                error!(?kind, "GPU unusable, stopped with the GPU idle: {message}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mps_daemon_is_recognised_by_its_control_pipe() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!mps_control_pipe_in(dir.path()));
        std::fs::write(dir.path().join("control"), b"").unwrap();
        assert!(mps_control_pipe_in(dir.path()));
    }
}
