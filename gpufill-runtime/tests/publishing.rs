//! Publishing a snapshot, which every worker does at every tick, allocates nothing: a
//! counting global allocator counts the test thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use gpufill_core::{Duty, State, Tick, Time, Utilization, Width};
use gpufill_runtime::{GpuLabels, Registry};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTED.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn publishing_a_tick_allocates_nothing() {
    let labels = GpuLabels {
        index: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        model: "NVIDIA H100 80GB HBM3".into(),
    };
    let (registry, mut publishers) = Registry::new(vec![labels]);
    let publisher = &mut publishers[0];
    let mut tick = Tick {
        at: Time::ZERO,
        state: State::Filling,
        target: Utilization::from_percent(50.0).unwrap(),
        sample: None,
        util: Some(Utilization::from_percent(49.0).unwrap()),
        duty: Duty::clamped(0.5),
        width: Width::ONE_WARP,
        shape: gpufill_core::LaunchShape::Bursts,
        foreign: 0,
        probed: None,
        cost: None,
        events: Vec::new(),
    };
    publisher.observe(&tick, 1); // warm
    COUNTED.with(|c| c.set(true));
    for i in 0..1000u64 {
        tick.at = Time::from_millis(i * 50);
        publisher.observe(&tick, 1);
    }
    COUNTED.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
    assert_eq!(registry.snapshots()[0].state, Some(State::Filling));
}
