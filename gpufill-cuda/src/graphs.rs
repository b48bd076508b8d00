//! Bursts of many short kernels for the CPU of a few launches: CUDA graphs of our spin
//! kernel back to back, replayed.
//!
//! Under MPS our kernels run beside other clients' kernels. A GPU-bound client whose
//! grid fills every SM in one wave cannot place a block on the SM where our one warp
//! runs (its block needs the SM's whole register file or shared memory), so that block
//! waits for our kernel to end: what a service of large bf16 matmuls paid grew with our
//! kernels' length and was lost in the noise at the shortest measured
//! (docs/benchmarks.md#graphs-of-short-kernels-under-mps-and-the-cpu-by-state-0a2bee4-to-55f8aaf-one-h100-a-host).
//! Launching a 25 ms burst as 500 kernels of 50 us one by one would
//! cost a launch each (10 000 a second); replaying graphs costs one launch per graph.
//!
//! [`KernelGraphs`] keeps graphs of 1, 2, 4, ... [`LARGEST`] kernels of one length, each
//! captured from our stream the first time a burst needs it; a burst of `n` kernels
//! launches the largest graph `n / LARGEST` times and one graph per bit of the rest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaFunction, CudaGraph, CudaStream, DriverError, sys};

use crate::error::CudaError;
use crate::spin::launch_spin;

/// Kernels in the largest graph (a power of two). With 50 us kernels a 50 ms period at
/// full duty is 1000 kernels: 3 replays of it plus at most 8 smaller graphs.
pub(crate) const LARGEST: u32 = 256;

/// Graphs of `2^b` kernels of one length, for `b` up to `log2(LARGEST)`. Every method
/// that reaches a graph takes `&mut self`: calls on one graph must never overlap.
pub(crate) struct KernelGraphs {
    kernel: Duration,
    /// What the graphs were captured with; a change drops them.
    captured_with: (u64, u32),
    graphs: Vec<Option<Graph>>,
}

/// One captured graph, reached only through `&mut KernelGraphs`.
struct Graph(CudaGraph);

// SAFETY: CUDA graph objects may be used from any thread provided calls on one object
// are serialized (CUDA driver API, "Graph object thread safety"); a `Graph` is moved
// with its `KernelGraphs` and used only through `&mut KernelGraphs`, so no two calls on
// it overlap.
unsafe impl Send for Graph {}
// SAFETY: a shared `&KernelGraphs` reaches no `Graph` (the methods that do take
// `&mut self`), so sharing one lets no call on a graph happen.
unsafe impl Sync for Graph {}

impl KernelGraphs {
    /// Graphs of kernels `kernel` long; none captured yet.
    pub(crate) fn new(kernel: Duration) -> Self {
        KernelGraphs {
            kernel,
            captured_with: (0, 0),
            graphs: (0..=LARGEST.trailing_zeros()).map(|_| None).collect(),
        }
    }

    /// The length of each kernel.
    pub(crate) fn kernel(&self) -> Duration {
        self.kernel
    }

    /// How many kernels of [`KernelGraphs::kernel`] make up the on-time of `count`
    /// kernels of `length` (rounded to the nearest; the controller makes up the rest).
    pub(crate) fn kernels_for(&self, count: u32, length: Duration) -> u32 {
        let on = length.as_nanos() * u128::from(count);
        let k = self.kernel.as_nanos().max(1);
        u32::try_from((on + k / 2) / k).unwrap_or(u32::MAX)
    }

    /// Captures (once) every graph a burst of `count` kernels will launch, with the
    /// spin kernel's `yield_ns` and `width`; graphs captured with others are dropped.
    /// Call it before recording the burst's start event: a capture records nothing on
    /// the stream, and nothing else may be launched on it meanwhile.
    ///
    /// # Errors
    /// The failed capture, instantiation or upload.
    pub(crate) fn prepare(
        &mut self,
        stream: &Arc<CudaStream>,
        func: &CudaFunction,
        count: u32,
        yield_ns: u64,
        width: u32,
    ) -> Result<(), CudaError> {
        if self.captured_with != (yield_ns, width) {
            self.graphs.iter_mut().for_each(|g| *g = None);
            self.captured_with = (yield_ns, width);
        }
        let ns = u64::try_from(self.kernel.as_nanos()).unwrap_or(u64::MAX);
        for bit in graph_bits(count) {
            let slot = &mut self.graphs[bit as usize];
            if slot.is_none() {
                *slot = Some(Graph(capture(stream, func, 1 << bit, ns, yield_ns, width)?));
            }
        }
        Ok(())
    }

    /// Launches `count` kernels from the graphs [`KernelGraphs::prepare`] captured.
    pub(crate) fn launch(&mut self, count: u32) -> Replayed {
        let mut done = Replayed {
            kernels: 0,
            graphs: 0,
            first_returned: None,
            outcome: Ok(()),
        };
        for bit in launch_order(count) {
            let launched = match &self.graphs[bit as usize] {
                Some(graph) => graph
                    .0
                    .launch()
                    .map_err(|e| CudaError::driver("cuGraphLaunch", e)),
                // prepare() was not called for this count: a bug, reported as a bad handle.
                None => Err(CudaError::driver(
                    "cuGraphLaunch",
                    DriverError(sys::CUresult::CUDA_ERROR_INVALID_HANDLE),
                )),
            };
            if let Err(e) = launched {
                done.outcome = Err(e);
                break;
            }
            done.first_returned.get_or_insert_with(Instant::now);
            done.kernels += 1 << bit;
            done.graphs += 1;
        }
        done
    }
}

/// What [`KernelGraphs::launch`] did.
pub(crate) struct Replayed {
    /// Kernels launched.
    pub(crate) kernels: u32,
    /// Graph launches.
    pub(crate) graphs: u32,
    /// When the first graph launch returned (none launched: `None`).
    pub(crate) first_returned: Option<Instant>,
    /// The failed launch, if one failed (the rest were not launched).
    pub(crate) outcome: Result<(), CudaError>,
}

/// The graph sizes (as powers of two) a burst of `count` kernels uses, each once.
fn graph_bits(count: u32) -> impl Iterator<Item = u32> {
    let top = LARGEST.trailing_zeros();
    let rest = count % LARGEST;
    let largest = (count >= LARGEST).then_some(top);
    largest
        .into_iter()
        .chain((0..top).filter(move |b| rest & (1 << b) != 0))
}

/// The graphs to launch for `count` kernels, in order: the largest `count / LARGEST`
/// times, then one per bit of the rest, largest first.
fn launch_order(count: u32) -> impl Iterator<Item = u32> {
    let top = LARGEST.trailing_zeros();
    let rest = count % LARGEST;
    std::iter::repeat_n(top, (count / LARGEST) as usize)
        .chain((0..top).rev().filter(move |b| rest & (1 << b) != 0))
}

/// Captures `kernels` spin kernels of `ns` back to back on `stream` into a graph,
/// instantiated and uploaded.
fn capture(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    kernels: u32,
    ns: u64,
    yield_ns: u64,
    width: u32,
) -> Result<CudaGraph, CudaError> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| CudaError::driver("cuStreamBeginCapture", e))?;
    let mut launched = Ok(());
    for _ in 0..kernels {
        launched = launch_spin(stream, func, ns, yield_ns, width);
        if launched.is_err() {
            break;
        }
    }
    // The capture is ended whatever happened, or the stream stays capturing.
    let ended = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(|e| CudaError::driver("cuStreamEndCapture", e));
    launched?;
    let graph = ended?.ok_or_else(|| {
        let none = DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        CudaError::driver("cuStreamEndCapture", none)
    })?;
    graph
        .upload()
        .map_err(|e| CudaError::driver("cuGraphUpload", e))?;
    tracing::debug!(kernels, kernel_us = ns / 1000, "kernel graph captured");
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(bits: impl Iterator<Item = u32>) -> u32 {
        bits.map(|b| 1 << b).sum()
    }

    #[test]
    fn a_burst_launches_its_count_exactly_with_few_graphs() {
        for count in [0, 1, 2, 3, 255, 256, 257, 500, 511, 1000, 4095] {
            assert_eq!(total(launch_order(count)), count, "{count}");
            let launches = launch_order(count).count() as u32;
            assert!(
                launches <= count / LARGEST + LARGEST.trailing_zeros(),
                "{count}: {launches}"
            );
            // Every graph launched is one that prepare captures.
            let needed: Vec<u32> = graph_bits(count).collect();
            assert!(launch_order(count).all(|b| needed.contains(&b)), "{count}");
        }
        // 25 ms of 50 us kernels: the 256 graph once, then 128, 64, 32, 16, 4.
        assert_eq!(
            launch_order(500).collect::<Vec<_>>(),
            vec![8, 7, 6, 5, 4, 2]
        );
    }

    #[test]
    fn the_on_time_is_kept_to_the_nearest_short_kernel() {
        let g = KernelGraphs::new(Duration::from_micros(50));
        assert_eq!(g.kernels_for(1, Duration::from_millis(25)), 500);
        assert_eq!(g.kernels_for(3, Duration::from_micros(20)), 1);
        assert_eq!(g.kernels_for(1, Duration::from_micros(24)), 0);
        assert_eq!(g.kernels_for(0, Duration::from_millis(25)), 0);
    }
}
