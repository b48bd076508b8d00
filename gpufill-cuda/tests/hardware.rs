//! Hardware smoke tests: they need an NVIDIA GPU and print what they measure.
//!
//! ```sh
//! cargo test --release -p gpufill-cuda --test hardware -- --ignored --nocapture
//! ```
//!
//! Every measured number is printed on a line starting with `hw:`. The tests hold a
//! lock so they never share the GPU with each other; together they take under 15 s.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::sleep;
use std::time::{Duration, Instant};

use gpufill_core::{Duty, Load, LoadSource, Time, Width};
use gpufill_cuda::{CudaError, CudaLoad, LaunchStats, LauncherSettings, MemoryInfo};

static GPU: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(PoisonError::into_inner)
}

fn load(duty: f64) -> Load {
    Load {
        duty: Duty::clamped(duty),
        width: Width::ONE_WARP,
    }
}

fn open(settings: LauncherSettings) -> (CudaLoad, Duration) {
    let t = Instant::now();
    let gpu = CudaLoad::open(0, settings).expect("open GPU 0");
    (gpu, t.elapsed())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn print_memory(what: &str, m: MemoryInfo) {
    println!(
        "hw: {what}: free {:.0} MiB of {:.0} MiB (used by everyone: {:.0} MiB)",
        mib(m.free_bytes),
        mib(m.total_bytes),
        mib(m.total_bytes - m.free_bytes)
    );
}

/// CPU time of this process's first thread whose name starts with `prefix`, from /proc
/// (Linux), in ns. Linux keeps 15 bytes of a thread name: `gpufill-launch-0` shows as
/// `gpufill-launch-`.
fn thread_cpu_ns(prefix: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim().starts_with(prefix) {
            let schedstat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            return schedstat.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

fn delta(a: LaunchStats, b: LaunchStats) -> LaunchStats {
    LaunchStats {
        kernels_launched: b.kernels_launched - a.kernels_launched,
        bursts: b.bursts - a.bursts,
        skipped_periods: b.skipped_periods - a.skipped_periods,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn lists_devices_and_opens_device_0_with_a_zero_stack() {
    let _gpu = exclusive();
    println!(
        "hw: driver supports CUDA {:?}",
        gpufill_cuda::driver_version().unwrap()
    );
    for d in gpufill_cuda::devices().expect("list devices") {
        println!("hw: device {d:?}");
    }
    let (gpu, took) = open(LauncherSettings::default());
    println!(
        "hw: opened GPU 0 in {took:.2?}; stack limit {} bytes",
        gpu.stack_limit()
    );
    print_memory("after open", gpu.memory_info().unwrap());
    assert!(
        gpu.stack_limit() < 1024,
        "stack limit not lowered: {}",
        gpu.stack_limit()
    );
    assert_eq!(
        gpu.stats(),
        LaunchStats::default(),
        "nothing launched before set_load"
    );

    let missing = CudaLoad::open(4096, LauncherSettings::default())
        .err()
        .unwrap();
    println!("hw: open(4096): {missing}");
    assert!(matches!(
        missing,
        CudaError::NoSuchDevice { ordinal: 4096, .. }
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn half_duty_for_two_seconds_runs_a_hundred_bursts_of_five_kernels() {
    let _gpu = exclusive();
    let (mut gpu, _) = open(LauncherSettings::default());
    let cpu0 = thread_cpu_ns("gpufill-launch");
    let before = gpu.stats();
    let t = Instant::now();
    gpu.set_load(Time::ZERO, load(0.5)).unwrap();
    sleep(Duration::from_secs(2));
    let s = delta(before, gpu.stats());
    let wall = t.elapsed();
    let cpu1 = thread_cpu_ns("gpufill-launch");
    print_memory("while running at duty 0.5", gpu.memory_info().unwrap());
    gpu.set_load(Time::ZERO, Load::IDLE).unwrap();
    assert!(gpu.quiesce(Duration::from_secs(1)));

    println!(
        "hw: duty 0.5 for {wall:.2?}: {} bursts, {} kernels ({:.2} per burst), {} skipped periods",
        s.bursts,
        s.kernels_launched,
        s.kernels_launched as f64 / s.bursts.max(1) as f64,
        s.skipped_periods
    );
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let share = (b - a) as f64 / wall.as_nanos() as f64 * 100.0;
        println!(
            "hw: launcher thread CPU: {:.2} ms = {share:.2} % of a core",
            (b - a) as f64 / 1e6
        );
        assert!(share < 10.0, "launcher CPU {share:.2} % of a core");
    }
    assert!((90..=110).contains(&s.bursts), "bursts: {}", s.bursts);
    assert!(s.kernels_launched <= 5 * s.bursts && s.kernels_launched >= 4 * s.bursts);
    assert!(s.skipped_periods <= 5, "skipped: {}", s.skipped_periods);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn quiesce_at_duty_0_9_returns_within_30_ms_and_launches_nothing_after() {
    let _gpu = exclusive();
    let (mut gpu, _) = open(LauncherSettings::default());
    let mut worst = Duration::ZERO;
    for round in 0..5u64 {
        gpu.set_load(Time::ZERO, load(0.9)).unwrap();
        // Vary the phase between the quiesce call and the launcher's periods.
        sleep(Duration::from_millis(300 + 7 * round));
        let t = Instant::now();
        let done = gpu.quiesce(Duration::from_secs(1));
        let took = t.elapsed();
        println!("hw: quiesce at duty 0.9, round {round}: {done} after {took:.2?}");
        assert!(done);
        worst = worst.max(took);
    }
    let after = gpu.stats();
    sleep(Duration::from_millis(60));
    assert_eq!(gpu.stats(), after, "launched while quiesced");
    println!("hw: quiesce worst {worst:.2?}; stats {after:?}");
    assert!(
        worst < Duration::from_millis(30),
        "quiesce took {worst:.2?}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn opens_and_drops_three_times_in_a_row() {
    let _gpu = exclusive();
    for (round, own_stream) in [true, false, true].into_iter().enumerate() {
        let settings = LauncherSettings {
            own_stream,
            ..LauncherSettings::default()
        };
        let (mut gpu, took) = open(settings);
        print_memory(
            &format!("round {round}, own_stream {own_stream}, opened in {took:.2?}"),
            gpu.memory_info().unwrap(),
        );
        gpu.set_load(Time::ZERO, load(0.5)).unwrap();
        sleep(Duration::from_millis(200));
        gpu.set_load(Time::ZERO, load(0.5)).unwrap();
        print_memory(
            &format!("round {round}, after 200 ms at duty 0.5"),
            gpu.memory_info().unwrap(),
        );
        let stats = gpu.stats();
        let t = Instant::now();
        drop(gpu);
        println!(
            "hw: round {round}: {stats:?}; dropped in {:.2?}",
            t.elapsed()
        );
        assert!(stats.bursts >= 8, "{stats:?}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn full_duty_waits_for_each_burst_instead_of_skipping_or_queueing() {
    let _gpu = exclusive();
    let (mut gpu, _) = open(LauncherSettings::default());
    let t = Instant::now();
    gpu.set_load(Time::ZERO, load(1.0)).unwrap();
    sleep(Duration::from_secs(1));
    let s = gpu.stats();
    let wall = t.elapsed();
    let quiesce = Instant::now();
    assert!(gpu.quiesce(Duration::from_secs(1)));
    println!(
        "hw: duty 1.0 for {wall:.2?}: {} bursts, {} kernels, {} skipped periods; quiesced in {:.2?}",
        s.bursts,
        s.kernels_launched,
        s.skipped_periods,
        quiesce.elapsed()
    );
    assert!(s.bursts >= 45, "{s:?}");
    assert!(s.skipped_periods <= 5, "{s:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_sleep_kernel_runs_full_width_bursts() {
    let _gpu = exclusive();
    let sms = gpufill_cuda::devices().expect("devices")[0].sm_count;
    let settings = LauncherSettings {
        kernel: gpufill_cuda::SpinKernel::Sleep,
        ..LauncherSettings::default()
    };
    let (mut gpu, _) = open(settings);
    let before = gpu.stats();
    let wide = Load {
        duty: Duty::clamped(0.5),
        width: Width::blocks(sms).expect("SMs"),
    };
    gpu.set_load(Time::ZERO, wide).unwrap();
    sleep(Duration::from_secs(1));
    let s = delta(before, gpu.stats());
    gpu.set_load(Time::ZERO, Load::IDLE).unwrap();
    assert!(gpu.quiesce(Duration::from_secs(1)));
    println!(
        "hw: spin_sleep, {sms} blocks, duty 0.5 for 1 s: {} bursts, {} kernels, {} skipped",
        s.bursts, s.kernels_launched, s.skipped_periods
    );
    assert!((45..=55).contains(&s.bursts), "bursts: {}", s.bursts);
    assert!(s.skipped_periods <= 3, "skipped: {}", s.skipped_periods);
}
