//! The simulated GPU as an [`Opener`], so an [`crate::Agent`] runs on a machine with no
//! GPU: in tests, in CI, and in the `simulated_agent` example.

use std::time::Duration;

use gpufill_core::sim::{SimConfig, SimError, SimGpu, SimLoad, SimProbe};
use gpufill_core::{FillLoop, FillSettings, YieldPolicy};

use crate::agent::Opener;
use crate::select::Gpu;
use crate::settings::{Metric, Settings};
use crate::steering::Loop;

/// Opens simulated GPUs, each a fresh [`SimGpu`] built from one [`SimConfig`] with our
/// kernels laid out as the settings say ([`SimOpener::sim_config`]). Time is the agent's
/// clock: the simulated GPU runs at wall-clock speed.
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

    /// The model a GPU opened with `settings` follows: [`SimOpener::config`] with MPS on
    /// where either asks for it, and our kernels laid out by `load.period_ms`,
    /// `load.max_kernel_us` and `load.beside_kernel_us`, as the CUDA launcher lays them.
    pub fn sim_config(&self, settings: &Settings, mps: bool) -> SimConfig {
        let load = &settings.load;
        SimConfig {
            mps: self.config.mps || mps,
            ..self.config.clone()
        }
        .with_launch(
            Duration::from_millis(load.period_ms),
            Duration::from_micros(load.max_kernel_us),
            Duration::from_micros(load.beside_kernel_us),
        )
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
        let sim = SimGpu::new(self.sim_config(settings, mps));
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
