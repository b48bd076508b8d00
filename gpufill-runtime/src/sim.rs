//! The simulated GPU as an [`Opener`], so an [`crate::Agent`] runs on a machine with no
//! GPU: in tests, in CI, and in the `simulated_agent` example.

use gpufill_core::sim::{SimConfig, SimError, SimGpu, SimLoad, SimProbe};
use gpufill_core::{FillLoop, FillSettings, YieldPolicy};

use crate::agent::Opener;
use crate::select::Gpu;
use crate::settings::{Metric, Settings};
use crate::steering::Loop;

/// Opens simulated GPUs, each a fresh [`SimGpu`] built from one [`SimConfig`]. Time is
/// the agent's clock: the simulated GPU runs at wall-clock speed.
#[derive(Clone, Debug, Default)]
pub struct SimOpener {
    /// The model every opened GPU follows.
    pub config: SimConfig,
}

impl SimOpener {
    /// `n` simulated GPUs to give [`crate::Agent::start`], indexed from 0.
    pub fn gpus(&self, n: u32) -> Vec<Gpu> {
        (0..n)
            .map(|index| Gpu {
                index,
                uuid: format!("GPU-00000000-0000-0000-0000-{index:012}"),
                name: "simulated GPU".to_owned(),
                ordinal: index as usize,
                sm_count: self.config.sm_count,
                max_resident_blocks: 0,
            })
            .collect()
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
    ) -> Result<Loop<SimProbe, SimLoad>, SimError> {
        let sim = SimGpu::new(SimConfig {
            mps: self.config.mps || mps,
            ..self.config.clone()
        });
        let probe = match settings.metric {
            Metric::Util => sim.probe(),
            Metric::Sm => sim.sm_probe(),
        };
        Ok(FillLoop::new(
            probe,
            sim.load(),
            settings.controller.build(),
            YieldPolicy::new(settings.yield_settings(mps)),
            FillSettings {
                shaping: settings.shaping(gpu.sm_count),
                ..settings.fill_settings()
            },
        ))
    }
}
