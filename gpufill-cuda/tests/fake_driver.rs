//! The launcher on the stand-in libcuda of `tests/fake-libcuda/`, doing what only it can
//! do: fail a launch on purpose, and hold a kernel back as another context's time slice
//! would. Each test builds the stand-in and runs itself on it, so they run on every
//! machine, with or without a GPU.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{MS, fake_queue_depths, load, on_the_stand_in, open, stop_and_time, twenty_ms};
use gpufill_core::{DeviceError, ErrorKind, LaunchShape, Load, LoadSource, OthersSign, Time};
use gpufill_cuda::{CudaError, LauncherSettings};

#[test]
fn a_failed_launch_in_the_pacing_thread_is_returned_by_the_next_call() {
    let name = "a_failed_launch_in_the_pacing_thread_is_returned_by_the_next_call";
    // The stand-in fails every kernel of exactly 777777 ns.
    on_the_stand_in(name, || {
        let settings = LauncherSettings {
            beside_kernel: Some(Duration::from_nanos(777_777)),
            ..twenty_ms()
        };
        let (mut gpu, _) = open(settings);
        gpu.set_shape(LaunchShape::OneInFlight);
        gpu.set_load(Time::ZERO, load(0.5)).unwrap();
        gpu.launch_due(Time::ZERO).unwrap();
        sleep(10 * MS);
        let err = gpu.launch_due(Time::ZERO).unwrap_err();
        println!("hw: the thread's failed launch, from launch_due: {err}");
        assert!(
            matches!(
                err,
                CudaError::Driver {
                    call: "cuLaunchKernel",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Lost);
        // Sticky, as a failed burst: every later call returns it.
        assert_eq!(gpu.set_load(Time::ZERO, Load::IDLE), Err(err.clone()));
        assert_eq!(gpu.launch_due(Time::ZERO), Err(err));
        assert_eq!(gpu.stats().one_in_flight, 0);
    });
}

#[test]
fn a_kernel_held_back_by_another_context_is_reported_and_nothing_more_launched() {
    let name = "a_kernel_held_back_by_another_context_is_reported_and_nothing_more_launched";
    // The stand-in runs every kernel of exactly 666666 ns 2 ms late.
    on_the_stand_in(name, || {
        let kernel = Duration::from_nanos(666_666);
        let settings = LauncherSettings {
            beside_kernel: Some(kernel),
            ..twenty_ms()
        };
        let (mut gpu, _) = open(settings);
        gpu.set_shape(LaunchShape::OneInFlight);
        gpu.set_load(Time::ZERO, load(0.5)).unwrap();
        gpu.launch_due(Time::ZERO).unwrap();
        std::thread::sleep(100 * MS);
        // Its kernel ended 2 ms late (past LATE, 300 us): reported, and the thread holds.
        assert_eq!(
            gpu.stats().one_in_flight,
            1,
            "nothing launched after a late kernel"
        );
        assert!(
            matches!(gpu.others_seen(), Some(OthersSign::HeldBack { .. })),
            "held back past its length"
        );
        assert_eq!(gpu.others_seen(), None, "reported once");
        // The loop's answer (a new load) lets it go on: the next kernel, late again.
        gpu.set_load(Time::ZERO, load(0.4)).unwrap();
        std::thread::sleep(100 * MS);
        assert_eq!(gpu.stats().one_in_flight, 2);
        assert!(gpu.others_seen().is_some());
        assert_eq!(gpu.stats().late_kernels, 2);
        let stop = stop_and_time(&mut gpu);
        println!("hw: kernels 2 ms late: held after each; stopped in {stop:.2?}");
        let (_, by_thread) = fake_queue_depths().unwrap();
        assert_eq!(by_thread, 1, "two kernels queued at once in one-in-flight");
    });
}
