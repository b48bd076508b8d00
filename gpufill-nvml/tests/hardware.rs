//! Smoke tests and call costs on a real GPU (GPU 0, or the UUID in `GPUFILL_TEST_GPU`):
//!
//! ```text
//! cargo test --release -p gpufill-nvml --test hardware -- --ignored --nocapture
//! ```
//!
//! They need no CUDA context and leave the GPU alone; all of them take under 15 s.
//! Where one cannot run it fails saying why, never passes unchecked: the two whose names
//! hold `gpm` need GPM (Hopper or newer; `--skip gpm` leaves them out elsewhere), and
//! the sample-timestamp test needs NVML to have buffered a utilization sample.

use std::time::{Duration, Instant, SystemTime};

use gpufill_core::{Clock, DeviceError, ErrorKind, PidView, Probe, SystemClock, Time, Unlisted};
use gpufill_nvml::{Nvml, NvmlProbe, OwnProcess, identify_own, identify_own_context};
use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;

/// Why a test that reads GPM fails where NVML refuses it: it cannot run there, and a
/// test that cannot run is not counted as passed.
const NEEDS_GPM: &str = "this test needs GPM (a Hopper or newer GPU, and NVML's \
                         permission to profile), which NVML refuses here; leave it out \
                         with --skip gpm";

fn nvml() -> Nvml {
    Nvml::init().unwrap_or_else(|e| panic!("NVML: {e}"))
}

fn test_gpu(nvml: Nvml) -> String {
    std::env::var("GPUFILL_TEST_GPU").unwrap_or_else(|_| {
        let gpus = nvml.gpus().expect("list GPUs");
        gpus.first().expect("no GPU").uuid.clone()
    })
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

fn wall_clock_us() -> u64 {
    let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
    since.expect("clock after 1970").as_micros() as u64
}

/// Mean cost of `call` over `n` calls, in microseconds, and how many calls failed
/// with something other than `NotFound` (which means "nothing new", not failure).
fn mean_us<T>(n: u32, mut call: impl FnMut() -> Result<T, NvmlError>) -> (f64, u32) {
    let mut failures = 0;
    let start = Instant::now();
    for _ in 0..n {
        match call() {
            Ok(_) | Err(NvmlError::NotFound) => {}
            Err(_) => failures += 1,
        }
    }
    (start.elapsed().as_secs_f64() * 1e6 / f64::from(n), failures)
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn lists_gpus() {
    let nvml = nvml();
    println!("driver {}", nvml.driver_version().expect("driver version"));
    let gpus = nvml.gpus().expect("list GPUs");
    assert!(!gpus.is_empty(), "NVML lists no GPU");
    for gpu in &gpus {
        println!(
            "gpu {} {} {}: {} / {} MiB, util {:?} %, power {:?} W, mig {}",
            gpu.index,
            gpu.uuid,
            gpu.name,
            mib(gpu.memory_used_bytes),
            mib(gpu.memory_total_bytes),
            gpu.utilization_percent,
            gpu.power_watts,
            gpu.mig_enabled
        );
        for p in &gpu.processes {
            let used = p.used_memory_bytes.map(mib);
            println!("  pid {} {:?} MiB {:?}", p.pid, used, p.name);
        }
        assert!(gpu.uuid.starts_with("GPU-"), "{}", gpu.uuid);
        assert!(gpu.memory_total_bytes > 0);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nvml_call_costs() {
    const N: u32 = 200;
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    let device = nvml.raw().device_by_uuid(uuid.as_str()).expect("device");
    let mut probe = NvmlProbe::new(nvml, &uuid, OwnProcess::none()).expect("probe");
    let costs = [
        (
            "running_compute_processes",
            mean_us(N, || device.running_compute_processes()),
        ),
        (
            "running_compute_processes_count",
            mean_us(N, || device.running_compute_processes_count()),
        ),
        (
            "mps_running_compute_processes",
            mean_us(N, || device.mps_running_compute_processes()),
        ),
        (
            "probe.foreign_processes",
            mean_us(N, || {
                probe
                    .foreign_processes(Time::ZERO)
                    .map_err(|_| NvmlError::Unknown)
            }),
        ),
        (
            "utilization_rates",
            mean_us(N, || device.utilization_rates()),
        ),
        (
            "samples(GpuUtilization, None)",
            mean_us(N, || device.samples(Sampling::GpuUtilization, None)),
        ),
        (
            "process_utilization_stats(None)",
            mean_us(N, || device.process_utilization_stats(None)),
        ),
    ];
    println!("mean cost over {N} calls on {uuid}:");
    for (name, (us, failures)) in costs {
        println!("  {name:34} {us:9.1} us  ({failures} failures)");
    }
    let (processes_us, failures) = costs[0].1;
    assert_eq!(failures, 0, "running_compute_processes failed");
    assert!(processes_us < 1_000.0, "the per-tick call is too slow");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nvml_sample_timestamps_are_wall_clock_microseconds() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    let device = nvml.raw().device_by_uuid(uuid.as_str()).expect("device");
    // An idle GPU may have no sample buffered yet: wait up to 2 s for one, then fail
    // (no sample, nothing checked), saying what the test needs.
    let start = Instant::now();
    let samples = loop {
        match device.samples(Sampling::GpuUtilization, None) {
            Ok(samples) => break samples,
            Err(NvmlError::NotFound) if start.elapsed() < Duration::from_secs(2) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(NvmlError::NotFound) => panic!(
                "NVML buffered no utilization sample in 2 s, so there is no timestamp to \
                 check: run this test with work on the GPU (gpufill run beside it)"
            ),
            Err(e) => panic!("samples: {e}"),
        }
    };
    let wall_now = wall_clock_us();
    let rates = device.utilization_rates().expect("utilization_rates");
    let stamps: Vec<u64> = samples.iter().map(|s| s.timestamp).collect();
    let gaps: Vec<i64> = stamps
        .windows(2)
        .map(|w| (w[1] as i64 - w[0] as i64) / 1000)
        .collect();
    let newest = samples.iter().max_by_key(|s| s.timestamp).expect("samples");
    let age_ms = (wall_now as i64 - newest.timestamp as i64) / 1000;
    println!("{} samples; gaps in ms: {gaps:?}", samples.len());
    println!(
        "newest sample {:?} is {age_ms} ms old by the system clock; utilization_rates now: {} %",
        newest.value, rates.gpu
    );
    if let SampleValue::U32(value) = newest.value
        && age_ms < 1_000
        && value != rates.gpu
    {
        println!("NOTE: utilization_rates differs from the newest sample");
    }
    // A monotonic or boot-time clock would be decades off; idle staleness is not.
    assert!(
        age_ms.abs() < 86_400_000,
        "timestamps are not wall-clock us"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn utilization_arrives_once_per_sample_period() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    let mut probe = NvmlProbe::new(nvml, &uuid, OwnProcess::none()).expect("probe");
    let clock = SystemClock::new();
    let start = clock.now();
    let mut readings = Vec::new();
    let mut tick = start;
    while clock.now() - start < Duration::from_secs(2) {
        let now = clock.now();
        if let Some(util) = probe.utilization(now).expect("utilization") {
            readings.push(((now - start).as_secs_f64() * 1e3, util));
        }
        tick += Duration::from_millis(10);
        clock.sleep_until(tick);
    }
    let period = probe.sample_period();
    println!(
        "sample period {:.1} ms (phase known: {}); {} readings:",
        period.as_secs_f64() * 1e3,
        probe.sample_phase_known(),
        readings.len()
    );
    for (at_ms, util) in &readings {
        println!("  {at_ms:7.1} ms  {util}");
    }
    let expected = (2.0 / period.as_secs_f64()).round() as i64;
    let got = readings.len() as i64;
    assert!(
        (got - expected).abs() <= 2,
        "{got} readings, expected {expected} +-2"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpm_sm_activity() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    let device = nvml.raw().device_by_uuid(uuid.as_str()).expect("device");
    println!("gpm_support: {:?}", device.gpm_support());
    let mut probe = NvmlProbe::new(nvml, &uuid, OwnProcess::none()).expect("probe");
    match probe.sm_activity() {
        Ok(first) => assert_eq!(first, None, "the first GPM sample has nothing to compare"),
        Err(e) if e.kind() == ErrorKind::Unsupported => panic!("{}: {e}", NEEDS_GPM),
        Err(e) => panic!("sm_activity: {e}"),
    }
    assert_eq!(probe.sm_activity().expect("too soon"), None);
    std::thread::sleep(Duration::from_millis(150));
    let activity = probe.sm_activity().expect("sm_activity");
    println!("GPM SM activity over 150 ms: {activity:?}");
    assert!(activity.is_some());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn own_process_identification_on_an_idle_device() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    // No CUDA context is created here, so nothing of ours appears in between.
    let before = nvml.compute_pids(&uuid).expect("compute pids");
    let after = nvml.compute_pids(&uuid).expect("compute pids");
    let own = identify_own(&before, &after, std::process::id());
    println!("before {before:?} after {after:?} -> own {own:?}");
    assert_eq!(own, OwnProcess::none());

    let mut probe = NvmlProbe::new(nvml, &uuid, own).expect("probe");
    let foreign = probe.foreign_processes(Time::ZERO).expect("foreign");
    println!("foreign processes: {foreign:?}");
    println!("own memory: {:?}", probe.own_memory_bytes());
    println!("power: {:?} W", probe.power_watts());
    println!("per-process SM %: {:?}", probe.process_utilization());
    println!(
        "again (only newer samples): {:?}",
        probe.process_utilization()
    );
    // Nothing of ours is listed: we hold nothing (0, as while release_context has
    // dropped the context; `None` only where the driver gives no sizes).
    assert_eq!(probe.own_memory_bytes().expect("own memory"), Some(0));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn metric_probe_reads_gpm_once_per_period() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    if let Err(e) = gpufill_nvml::check_gpm(nvml, &uuid) {
        let refusal = gpufill_nvml::gpm_refusal(&e);
        assert!(refusal.is_some(), "check_gpm: {e}");
        panic!("{} ({refusal:?}): {e}", NEEDS_GPM);
    }
    let clock = SystemClock::new();
    let inner = NvmlProbe::new(nvml, &uuid, OwnProcess::none()).expect("probe");
    let mut probe = gpufill_nvml::MetricProbe::sm_activity(inner).expect("sm probe");
    let mut readings = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1050) {
        if let Some(u) = probe.utilization(clock.now()).expect("sm reading") {
            readings.push(u.percent());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("GPM SM readings over 1 s on an idle GPU: {readings:?}");
    assert!((4..=6).contains(&readings.len()), "{readings:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_namespace_view_reads_device_memory_against_the_list() {
    let nvml = nvml();
    let uuid = test_gpu(nvml);
    println!("this process's PID view: {}", gpufill_nvml::pid_view());
    // No context of ours: the snapshots agree and nothing of ours is listed.
    let before = nvml.snapshot(&uuid).expect("snapshot");
    let after = nvml.snapshot(&uuid).expect("snapshot");
    let own = identify_own_context(&before, &after, std::process::id());
    println!("snapshot {after:?} -> own {own:?}");
    let inner = NvmlProbe::new(nvml, &uuid, own)
        .expect("probe")
        .with_pid_view(PidView::Namespace);
    // Through the probe `run` uses, which must pass the namespace view on.
    let mut probe = gpufill_nvml::MetricProbe::utilization(inner);
    let clock = SystemClock::new();
    let mut seen = Vec::new();
    for _ in 0..20 {
        let now = clock.now();
        let foreign = probe.foreign_processes(now).expect("foreign");
        let unlisted = probe.unlisted(now).expect("unlisted");
        seen.push((foreign.len(), unlisted));
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("(listed foreign, unlisted) every 50 ms: {seen:?}");
    assert!(seen.iter().all(|&(_, u)| u != Unlisted::ListComplete));
    let device = nvml.raw().device_by_uuid(uuid.as_str()).expect("device");
    let (us, failures) = mean_us(2000, || device.memory_info());
    println!("nvmlDeviceGetMemoryInfo v2: {us:.1} us a call");
    assert_eq!(failures, 0);
}
