use super::*;

/// The simulated GPU, with a launcher counter that can misbehave and a foreign
/// process that can fail: the parts of the real rig the simulation lacks.
struct Scripted {
    sim: SimRig,
    kernels: u64,
    launches_while_yielding: bool,
    foreign_fails: bool,
}

impl Rig for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }
    fn now(&self) -> Time {
        self.sim.now()
    }
    fn step(&mut self, target: Utilization) -> Result<Tick, RigError> {
        let tick = self.sim.step(target)?;
        if tick.state.fills() || self.launches_while_yielding {
            self.kernels += 5;
        }
        Ok(tick)
    }
    fn wait(&mut self) {}
    fn power_watts(&mut self) -> Option<f64> {
        Some(100.0)
    }
    fn idle_power_watts(&self) -> Option<f64> {
        Some(60.0)
    }
    fn own_memory_mib(&mut self) -> Option<f64> {
        Some(254.0)
    }
    fn yield_unsupported(&self) -> Option<String> {
        None
    }
    fn start_foreign(&mut self, run: Duration) -> Result<(), RigError> {
        self.sim.start_foreign(run)
    }
    fn foreign(&mut self) -> ForeignSeen {
        let mut seen = self.sim.foreign();
        if self.foreign_fails && seen.listed.is_some() {
            seen.failure = Some("exit status: 1: cannot open a CUDA context".into());
        }
        seen
    }
    fn quiesce(&mut self) -> Option<Time> {
        self.sim.quiesce()
    }
    fn kernels_launched(&self) -> Option<u64> {
        Some(self.kernels)
    }
    fn overlap(&mut self) -> Option<Duration> {
        None
    }
    fn finish(&mut self) {}
}

fn scripted(launches_while_yielding: bool, foreign_fails: bool) -> Scripted {
    Scripted {
        sim: SimRig::new(&Settings::default()),
        kernels: 0,
        launches_while_yielding,
        foreign_fails,
    }
}

fn plan() -> Plan {
    Plan {
        targets: vec![Utilization::from_percent(50.0).unwrap()],
        seconds_per_target: 3.0,
        skip_yield: None,
    }
}

fn bench(rig: &mut dyn Rig, plan: &Plan) -> Result<BenchSummary, BenchError> {
    let settings = Settings::default();
    let (rec, skipped) = measure(rig, plan, &settings, &mut |_| {})?;
    Ok(BenchSummary::new(rig, plan, true, &settings, &rec, skipped))
}

#[test]
fn a_launcher_quiet_while_yielding_passes_and_power_memory_reach_the_summary() {
    let summary = bench(&mut scripted(false, false), &plan()).unwrap();
    let y = summary.yield_test.as_ref().unwrap();
    assert_eq!(y.own_kernels_while_yielding, Some(0));
    assert!(y.passed());
    let t = &summary.targets[0];
    assert_eq!(
        (t.mean_power_w, t.own_memory_mib),
        (Some(100.0), Some(254.0))
    );
    assert_eq!(summary.idle_power_w, Some(60.0));
}

#[test]
fn kernels_launched_while_yielding_fail_the_yield_test() {
    let summary = bench(&mut scripted(true, false), &plan()).unwrap();
    let y = summary.yield_test.unwrap();
    assert!(y.own_kernels_while_yielding.unwrap() > 0);
    assert!(!y.passed());
}

#[test]
fn a_failed_foreign_process_is_reported() {
    let err = bench(&mut scripted(false, true), &plan()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the foreign process of the yield test failed: exit status: 1: cannot open a CUDA context"
    );
}

#[test]
fn the_simulated_gpu_holds_each_target_then_yields_and_comes_back() {
    let plan = Plan {
        targets: [20.0, 60.0]
            .map(|p| Utilization::from_percent(p).unwrap())
            .to_vec(),
        ..plan()
    };
    let mut progress = Vec::new();
    let settings = Settings::default();
    let mut rig = SimRig::new(&settings);
    let (rec, skipped) = measure(&mut rig, &plan, &settings, &mut |p| progress.push(p)).unwrap();
    assert_eq!(skipped, None);
    assert_eq!(progress[0], Progress::Target(plan.targets[0]));
    assert!(progress.contains(&Progress::YieldTest));
    let summary = BenchSummary::new(&rig, &plan, true, &settings, &rec, skipped);
    assert_eq!(summary.targets.len(), 2);
    assert!(
        summary.targets.iter().all(|t| t.settle_s.is_some()),
        "{summary:?}"
    );
    assert_eq!(summary.pauses(), 0);
    let y = summary.yield_test.unwrap();
    assert!(y.passed(), "{y:?}");
    assert_eq!(y.target_percent, 60.0);
    let elapsed = rec.ticks.last().unwrap().at.saturating_since(rec.start);
    assert!(elapsed >= Duration::from_secs(6) + yield_test_length(&settings) / 2);
}

#[test]
fn a_skipped_yield_test_says_why() {
    let plan = Plan {
        skip_yield: Some("--no-yield".into()),
        ..plan()
    };
    let summary = bench(&mut scripted(false, false), &plan).unwrap();
    assert_eq!(summary.yield_test, None);
    assert_eq!(summary.yield_skipped.as_deref(), Some("--no-yield"));
}
