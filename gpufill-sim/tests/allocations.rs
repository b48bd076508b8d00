//! The loop allocates nothing per tick while filling, a constant few small vectors per
//! tick while a process is listed, and the heap does not grow in either state. A
//! counting global allocator counts the allocations of the test's own thread (not the
//! harness's: it allocates when it reports a slow test).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use gpufill_core::LoopSettings;
use gpufill_core::{ControllerKind, FillSettings, State, Time, YieldSettings};
use gpufill_sim::{ForeignJob, SimConfig, Simulation};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Signed: the thread may free what it allocated before counting began.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// Set on the test's thread: only its allocations count.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_filling_and_yielding_ticks_allocate_nothing() {
    COUNTED.with(|c| c.set(true));
    let cfg = SimConfig {
        foreign: vec![ForeignJob::compute_bound(200.0, 400.0, 0.5)],
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(
        cfg,
        &LoopSettings {
            fill: FillSettings::default(),
            yielding: YieldSettings::default(),
            controller: ControllerKind::Pi,
        },
        Duration::from_millis(10),
    );
    let mut states = [0u64; 2];
    let count = |sim: &mut Simulation, from: f64, to: f64, state: State| {
        sim.run_until(Time::from_secs_f64(from), |_| {});
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let live = LIVE_BYTES.load(Ordering::Relaxed);
        let mut ticks = 0u64;
        sim.run_until(Time::from_secs_f64(to), |t| {
            assert_eq!(t.state, state);
            ticks += 1;
        });
        // No growth: what the ticks allocated they freed (the sim's sample queue may
        // keep a few bytes of capacity).
        let grown = LIVE_BYTES.load(Ordering::Relaxed) - live;
        assert!(grown < 1024, "{state:?}: {grown} bytes kept");
        (ALLOCATIONS.load(Ordering::Relaxed) - before, ticks)
    };
    // 190 s of filling (19 000 ticks, 950 samples), then 190 s beside a listed job.
    let (filling, n) = count(&mut sim, 10.0, 200.0, State::Filling);
    assert_eq!(n, 19_000);
    states[0] = filling;
    let (yielding, n) = count(&mut sim, 201.0, 390.0, State::Yielding);
    assert_eq!(n, 18_900);
    states[1] = yielding;
    // Yielding ticks list one process: the probe's list, its name, and the policy's
    // PIDs are three small allocations a tick, freed within it.
    assert_eq!(states[0], 0, "allocations while filling: {states:?}");
    assert!(
        (1..=3 * 18_900).contains(&states[1]),
        "allocations while yielding (some, or the allocator counts nothing): {states:?}"
    );
}
