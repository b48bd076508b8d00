//! Property test on the simulated GPU's PID namespace view: whatever foreign jobs come
//! and go, `presence` mode never runs a kernel of ours beside a complete foreign context
//! (64 cases, milliseconds each in a debug build).

use std::time::Duration;

use gpufill_core::LoopSettings;
use gpufill_core::{ControllerKind, FillSettings, State, Time, Utilization, YieldSettings};
use gpufill_sim::{ForeignJob, SimConfig, Simulation};
use proptest::prelude::*;

/// One random job for the namespace property: when the host would list it (s), how
/// long it stays (s), its first kernel after that (ms), its load, its memory (MiB), and
/// whether it only holds its context.
type JobSpec = (f64, f64, u64, f64, u64, bool);

fn job() -> impl Strategy<Value = JobSpec> {
    (
        0.5..20.0f64,
        0.3..10.0f64,
        85..250u64,
        0.01..=1.0f64,
        100..3_000u64,
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn inside_a_pid_namespace_presence_runs_no_kernel_beside_a_foreign_context(
        jobs in proptest::collection::vec(job(), 1..5),
        target in 0.05..=1.0f64,
    ) {
        let foreign: Vec<ForeignJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(listed, life, first_ms, load, mib, idle))| {
                let leaves = Time::from_secs_f64(listed + life);
                ForeignJob {
                    pid: 5000 + i as u32,
                    first_kernel_after: Duration::from_millis(first_ms),
                    memory_bytes: mib << 20,
                    work: idle.then_some((leaves, leaves)),
                    ..ForeignJob::compute_bound(listed, listed + life, load)
                }
            })
            .collect();
        // From its first kernel on, a job's context is complete.
        let complete: Vec<(Time, Time)> = foreign
            .iter()
            .map(|j| (j.listed_at + j.first_kernel_after, j.leaves_at))
            .collect();
        let cfg = SimConfig {
            foreign,
            // The longest burst a stop leaves running: 90 % of a 50 ms period.
            stop_tail: Duration::from_millis(45),
            ..SimConfig::default().pid_namespace()
        };
        let settings = FillSettings {
            target: Utilization::saturating_from_fraction(target),
            ..FillSettings::default()
        };
        let mut sim = Simulation::new(
        cfg,
        &LoopSettings {
            fill: settings,
            yielding: YieldSettings::default(),
            controller: ControllerKind::Pi,
        },
        Duration::from_millis(50),
    );
        let mut ticks = Vec::new();
        sim.run_until(Time::from_secs_f64(35.0), |t| ticks.push(t.clone()));
        for t in &ticks {
            prop_assert!(t.duty.fraction() <= 1.0 && t.state != State::Stopped, "{t:?}");
            let present = complete.iter().any(|&(from, to)| from <= t.at && t.at < to);
            if present {
                prop_assert!(t.duty.is_zero(), "{t:?}");
            }
        }
        let report = sim.gpu().report(Time::from_secs_f64(35.0));
        for j in &report.foreign {
            prop_assert_eq!(j.overlap, Duration::ZERO, "{:?}", report);
        }
    }
}
