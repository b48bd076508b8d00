//! Controller tuning: settle time of each controller across targets and sampling
//! periods on the simulated GPU. Criterion's measured "time" here is the *virtual*
//! settle time (through `iter_custom`), so its reports compare controllers directly;
//! the mean tracking error after settling is printed beside it.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gpufill_bench::{cases, track};
use gpufill_core::ControllerKind;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("settle");
    group.sample_size(10);
    group.measurement_time(Duration::from_millis(500));
    group.warm_up_time(Duration::from_millis(100));
    println!(
        "{:<8} {:>9} {:>7} {:>10} {:>12}",
        "ctrl", "period_ms", "target", "settle_s", "mae_points"
    );
    for (name, kind, run) in [
        ("pi", ControllerKind::Pi, Duration::from_secs(30)),
        ("window", ControllerKind::Window, Duration::from_secs(300)),
    ] {
        for case in cases(run) {
            let t = track(case, kind.build());
            println!(
                "{:<8} {:>9} {:>7.0} {:>10} {:>12.2}",
                name,
                case.sample_period.as_millis(),
                case.target,
                t.settle
                    .map_or("never".into(), |s| format!("{:.2}", s.as_secs_f64())),
                t.mean_abs_error
            );
            let id = format!(
                "{name}/{}ms/{}pct",
                case.sample_period.as_millis(),
                case.target
            );
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let settle = track(case, kind.build()).settle.unwrap_or(run);
                    settle * u32::try_from(iters).unwrap_or(u32::MAX)
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
