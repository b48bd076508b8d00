//! CPU cost of one fill-loop step: bare (no-op device) and against the simulated GPU.

use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gpufill_core::{
    FillLoop, FillSettings, Load, LoadSource, PiController, Probe, ProcessInfo, Time, Utilization,
    YieldPolicy,
};
use gpufill_sim::{SimConfig, SimGpu};

/// A device that answers at once: isolates the loop's own cost.
struct Instant;

impl Probe for Instant {
    type Error = Infallible;
    fn utilization(&mut self, now: Time) -> Result<Option<Utilization>, Infallible> {
        let fresh = now.since_epoch().as_millis().is_multiple_of(200);
        Ok(fresh.then(|| Utilization::saturating_from_fraction(0.49)))
    }
    fn foreign_processes(&mut self, _: Time) -> Result<Vec<ProcessInfo>, Infallible> {
        Ok(Vec::new())
    }
}

impl LoadSource for Instant {
    type Error = Infallible;
    fn set_load(&mut self, _: Time, load: Load) -> Result<(), Infallible> {
        black_box(load);
        Ok(())
    }
}

/// Times one step of a loop over `probe` and `load`, ticking every 10 ms of virtual time.
fn bench_step<P: Probe, L: LoadSource>(c: &mut Criterion, name: &str, probe: P, load: L) {
    let mut fill = FillLoop::new(
        probe,
        load,
        PiController::default(),
        YieldPolicy::default(),
        FillSettings::default(),
    );
    let mut now = Time::ZERO;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += Duration::from_millis(10);
            black_box(fill.step(now))
        });
    });
}

fn bench(c: &mut Criterion) {
    bench_step(c, "step/bare", Instant, Instant);
    let gpu = SimGpu::new(SimConfig::default());
    bench_step(c, "step/simulated_gpu", gpu.probe(), gpu.load());
}

criterion_group!(benches, bench);
criterion_main!(benches);
