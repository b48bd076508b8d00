//! The simulated GPU as an [`Opener`], so an [`Agent`](crate::Agent) runs on a machine
//! with no GPU: in tests, in CI, and in the `simulated_agent` example. [`SimOpener`]
//! builds each GPU from the model [`SimConfig`]; each opened GPU is a [`SimGpu`] (add a
//! [`ForeignJob`](gpufill_sim::ForeignJob) while the agent runs, read the
//! [`SimReport`](gpufill_sim::SimReport)).
//!
//! It lives here, beside [`Opener`], [`Gpu`] and [`Settings`], rather than in
//! `gpufill-sim`: the simulated GPU is a model on core's traits alone, so the simulator
//! and the benches need no GPU crate (`cargo tree -p gpufill-sim -e normal` lists
//! neither cudarc nor nvml-wrapper), and the agent it runs is this crate's own.
//!
//! ```
//! use std::time::Duration;
//! use gpufill_runtime::{Agent, AgentOptions, Settings, SimOpener};
//! use gpufill_sim::{ForeignJob, SimConfig};
//!
//! let opener = SimOpener::new(SimConfig::default());
//! let agent = Agent::start(opener.clone(), opener.gpus(1), Settings::default(), AgentOptions::default())?;
//! std::thread::sleep(Duration::from_millis(100));
//! // GPU 0 as its worker opened it: a job arrives now and stays a minute.
//! let gpu = opener.gpu(0).expect("opened");
//! let now = gpu.now().as_secs_f64();
//! gpu.add_foreign(ForeignJob::compute_bound(now, now + 60.0, 0.5));
//! agent.stop();
//! agent.join()?;
//! println!("our kernels ran {:?}", gpu.report(gpu.now()).own_busy);
//! # Ok::<(), gpufill_runtime::AgentError>(())
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use gpufill_core::{FillLoop, Loop, Time};
use gpufill_nvml::GpuInfo;
use gpufill_sim::{SimConfig, SimError, SimGpu, SimLoad, SimProbe};

use super::Opener;
use crate::gpus::GpuSelector;
use crate::select::{Gpu, SelectError, choose};
use crate::settings::{Metric, Settings};

/// Opens simulated GPUs, each a [`SimGpu`] built from its [`SimConfig`] (one for every
/// GPU, or one of its own: [`SimOpener::with_gpu`]) with our kernels laid out as the
/// settings say ([`SimOpener::sim_config`]). Time is the agent's clock: the simulated
/// GPUs run at wall-clock speed from the agent's start.
///
/// Each GPU is made when its worker first opens it and kept: a worker that loses it
/// opens the same device again (which fails while the model says it is lost), and
/// [`SimOpener::gpu`] hands it out. Clones share the GPUs they open, so keep a clone
/// to reach them; give each agent an opener of its own.
#[derive(Clone, Debug, Default)]
pub struct SimOpener {
    config: SimConfig,
    per_gpu: BTreeMap<u32, SimConfig>,
    opened: Arc<Mutex<BTreeMap<u32, SimGpu>>>,
}

impl SimOpener {
    /// Every GPU follows `config`.
    pub fn new(config: SimConfig) -> Self {
        SimOpener {
            config,
            ..SimOpener::default()
        }
    }

    /// GPU `index` follows `config` instead (a foreign job on that GPU alone, say).
    pub fn with_gpu(mut self, index: u32, config: SimConfig) -> Self {
        self.per_gpu.insert(index, config);
        self
    }

    /// The model GPU `index` follows.
    pub fn config(&self, index: u32) -> &SimConfig {
        self.per_gpu.get(&index).unwrap_or(&self.config)
    }

    /// `n` simulated GPUs to give [`Agent::start`](crate::Agent::start), indexed from 0, with UUIDs
    /// `GPU-00000000-0000-0000-0000-00000000000N`.
    pub fn gpus(&self, n: u32) -> Vec<Gpu> {
        (0..n)
            .map(|index| Gpu {
                index,
                uuid: format!("GPU-00000000-0000-0000-0000-{index:012}"),
                name: "simulated GPU".to_owned(),
                ordinal: index as usize,
                sm_count: self.config(index).sm_count,
                max_resident_blocks: 0,
            })
            .collect()
    }

    /// The GPUs of a machine of `n` simulated GPUs that `selector` picks, by the rules
    /// [`select()`](crate::select()) applies to real ones (indices and UUIDs, in the order given).
    ///
    /// # Errors
    /// [`SelectError::NoSuchGpu`] for a GPU the machine does not have.
    pub fn select(&self, n: u32, selector: &GpuSelector) -> Result<Vec<Gpu>, SelectError> {
        let gpus = self.gpus(n);
        let listed: Vec<GpuInfo> = gpus.iter().map(listing).collect();
        let selection = choose(&listed, selector)?;
        Ok(selection
            .chosen
            .iter()
            .filter_map(|info| gpus.iter().find(|g| g.index == info.index).cloned())
            .collect())
    }

    /// Simulated GPU `index`, once its worker has opened it.
    pub fn gpu(&self, index: u32) -> Option<SimGpu> {
        self.opened().get(&index).cloned()
    }

    /// The model a GPU without one of its own ([`SimOpener::with_gpu`]) follows once
    /// opened with `settings`: the opener's shared model with MPS on where either asks
    /// for it, and our kernels laid out by `load.period_ms`, `load.max_kernel_us` and
    /// `load.beside_kernel_us`, as the CUDA launcher lays them.
    pub fn sim_config(&self, settings: &Settings, mps: bool) -> SimConfig {
        laid_out(&self.config, settings, mps)
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, SimGpu>> {
        self.opened.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `config` with MPS where asked and our kernels laid out as `settings` say.
fn laid_out(config: &SimConfig, settings: &Settings, mps: bool) -> SimConfig {
    with_launch_settings(
        SimConfig {
            mps: config.mps || mps,
            ..config.clone()
        },
        settings,
    )
}

/// `config` with our kernels laid out as `settings` say (`load.period_ms`,
/// `load.max_kernel_us`, `load.beside_kernel_us`, and with `config.mps`
/// `load.mps_kernel_us`), from the CUDA launcher's own settings
/// ([`Settings::launcher_settings_under`]).
pub fn with_launch_settings(config: SimConfig, settings: &Settings) -> SimConfig {
    let launch = settings.launcher_settings_under(config.mps);
    config
        .with_launch(launch.period, launch.max_kernel, launch.beside_kernel)
        .with_mps_kernel(launch.graph_kernel)
}

/// How NVML would list a simulated GPU, for [`choose`].
fn listing(gpu: &Gpu) -> GpuInfo {
    GpuInfo {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        name: gpu.name.clone(),
        memory_used_bytes: 0,
        memory_total_bytes: 0,
        utilization_percent: None,
        power_watts: None,
        mig_enabled: false,
        processes: Vec::new(),
    }
}

impl Opener for SimOpener {
    type Probe = SimProbe;
    type Load = SimLoad;
    type Error = SimError;

    fn open(
        &self,
        gpu: &Gpu,
        settings: &Settings,
        mps: bool,
        now: Time,
    ) -> Result<Loop<SimProbe, SimLoad>, SimError> {
        let sim = self
            .opened()
            .entry(gpu.index)
            .or_insert_with(|| SimGpu::new(laid_out(self.config(gpu.index), settings, mps)))
            .clone();
        let (probe, load) = sim.open(now)?;
        let probe = match settings.metric {
            Metric::Util => probe,
            Metric::Sm => sim.sm_probe(),
        };
        Ok(FillLoop::build(
            probe,
            load,
            &settings.loop_settings(gpu.sm_count, mps),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn opened_gpus_lay_our_kernels_out_as_the_settings_say() {
        let opener = SimOpener::default();
        let mut settings = Settings::default();
        settings.load.period_ms = 100;
        settings.load.max_kernel_us = 2000;
        settings.load.beside_kernel_us = 250;
        let cfg = opener.sim_config(&settings, true);
        assert!(cfg.mps);
        assert_eq!(cfg.period, Duration::from_millis(100));
        assert_eq!(cfg.max_kernel, Duration::from_millis(2));
        assert_eq!(cfg.one_in_flight_kernel, Some(Duration::from_micros(250)));
        // 0: bursts beside quiet holders too.
        settings.load.beside_kernel_us = 0;
        assert_eq!(
            opener.sim_config(&settings, false).one_in_flight_kernel,
            None
        );
        assert!(!opener.sim_config(&settings, false).mps);
        // Under MPS, kernels of load.mps_kernel_us (50 us); none without MPS.
        assert_eq!(
            opener.sim_config(&settings, true).mps_kernel,
            Some(Duration::from_micros(50))
        );
        assert_eq!(opener.sim_config(&settings, false).mps_kernel, None);
        settings.load.mps_kernel_us = 0;
        assert_eq!(opener.sim_config(&settings, true).mps_kernel, None);
    }

    #[test]
    fn a_gpu_is_opened_once_and_again_only_while_it_is_not_lost() {
        let lost = SimConfig {
            lost_at: Some(Time::from_secs_f64(1.0)),
            recovers_at: Some(Time::from_secs_f64(2.0)),
            ..SimConfig::default()
        };
        let opener = SimOpener::default().with_gpu(1, lost);
        let gpus = opener.gpus(2);
        let settings = Settings::default();
        assert!(opener.gpu(1).is_none(), "made when first opened");
        assert!(opener.open(&gpus[1], &settings, false, Time::ZERO).is_ok());
        let first = opener.gpu(1).unwrap();
        let at = |s: f64| Time::from_secs_f64(s);
        assert_eq!(
            opener.open(&gpus[1], &settings, false, at(1.5)).err(),
            Some(SimError::Lost)
        );
        assert!(opener.open(&gpus[1], &settings, false, at(2.5)).is_ok());
        // The same device all along: its clock went on.
        assert_eq!(first.now(), at(2.5));
        // GPU 0 follows the shared model, which is never lost.
        assert!(opener.open(&gpus[0], &settings, false, at(1.5)).is_ok());
    }

    #[test]
    fn selection_follows_the_rules_for_real_gpus() {
        let opener = SimOpener::default();
        let by = |flag: &str| opener.select(4, &GpuSelector::parse_flag(flag).unwrap());
        let indices = |gpus: Vec<Gpu>| gpus.iter().map(|g| g.index).collect::<Vec<_>>();
        assert_eq!(indices(by("all").unwrap()), [0, 1, 2, 3]);
        assert_eq!(
            indices(by("2,GPU-00000000-0000-0000-0000-000000000000").unwrap()),
            [2, 0]
        );
        assert!(matches!(
            by("4"),
            Err(SelectError::NoSuchGpu { found: 4, .. })
        ));
    }
}
