//! The bench's simulated GPU: the real fill loop in virtual time, and a simulated
//! foreign job for the yield test. No power or memory readings exist here.

use std::time::Duration;

use gpufill_core::{Tick, Utilization};
use gpufill_sim::{ForeignJob, SimConfig, Simulation};

use super::{ForeignSeen, Rig, RigError};
use crate::{Settings, Time};

/// Share of time the simulated foreign job wants the GPU.
const FOREIGN_LOAD: f64 = 0.5;

/// The simulated GPU under the fill loop built from `config`.
pub struct SimRig {
    sim: Simulation,
    tick: Duration,
    stop_tail: Duration,
    foreign: Option<ForeignJob>,
    last_step: Time,
}

impl SimRig {
    /// A fresh simulated GPU (the H200 model) at time zero.
    pub fn new(config: &Settings) -> Self {
        let cfg = SimConfig::default();
        let (stop_tail, recipe) = (cfg.stop_tail, config.loop_settings(cfg.sm_count, false));
        SimRig {
            sim: Simulation::new(cfg, &recipe, config.tick()),
            tick: config.tick(),
            stop_tail,
            foreign: None,
            last_step: Time::ZERO,
        }
    }
}

impl Rig for SimRig {
    fn name(&self) -> String {
        "simulated GPU (H200 model)".into()
    }

    fn now(&self) -> Time {
        self.sim.now()
    }

    fn step(&mut self, target: Utilization) -> Result<Tick, RigError> {
        self.sim.fill_mut().set_target(target);
        let mut stepped = None;
        let until = self.sim.now() + self.tick;
        self.sim.run_until(until, |t| stepped = Some(t.clone()));
        let tick = stepped.ok_or("the simulated loop made no step")?;
        self.last_step = tick.at;
        Ok(tick)
    }

    /// The virtual clock moved on in [`Rig::step`].
    fn wait(&mut self) {}

    fn power_watts(&mut self) -> Option<f64> {
        None
    }

    fn idle_power_watts(&self) -> Option<f64> {
        None
    }

    fn own_memory_mib(&mut self) -> Option<f64> {
        None
    }

    fn yield_unsupported(&self) -> Option<String> {
        None
    }

    fn start_foreign(&mut self, run: Duration) -> Result<(), RigError> {
        let start = self.sim.now().as_secs_f64();
        let job = ForeignJob::compute_bound(start, start + run.as_secs_f64(), FOREIGN_LOAD);
        self.sim.gpu().add_foreign(job.clone());
        self.foreign = Some(job);
        Ok(())
    }

    fn foreign(&mut self) -> ForeignSeen {
        let now = self.sim.now();
        let Some(job) = &self.foreign else {
            return ForeignSeen::default();
        };
        let left = (now >= job.leaves_at).then_some(job.leaves_at);
        ForeignSeen {
            listed: (now >= job.listed_at).then_some(job.listed_at),
            unlisted: left,
            exited: left,
            failure: None,
        }
    }

    fn quiesce(&mut self) -> Option<Time> {
        // The simulated GPU finishes queued work `stop_tail` after the step that
        // made the load idle.
        Some(self.last_step + self.stop_tail)
    }

    fn kernels_launched(&self) -> Option<u64> {
        None
    }

    fn overlap(&mut self) -> Option<Duration> {
        let report = self.sim.gpu().report(self.sim.now());
        self.foreign.as_ref().and_then(|job| {
            report
                .foreign
                .iter()
                .find(|f| f.pid == job.pid)
                .map(|f| f.overlap)
        })
    }

    fn finish(&mut self) {}
}
