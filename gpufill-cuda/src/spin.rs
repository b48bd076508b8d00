//! Launching the spin kernel: one place for its launch shape (one warp per block) and
//! the one `unsafe` launch, shared by the bursts ([`crate::launcher`]) and the pacing
//! thread ([`crate::pacing`]).

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use crate::error::CudaError;

/// Threads per block: one warp, the least a kernel can occupy.
const BLOCK_THREADS: u32 = 32;

/// How long a jump of the GPU clock between two reads in our kernel must be for it to end
/// at once (its `yield_ns` argument): our kernel was preempted by another context's
/// time slice (kernels/spin.cu). A preemption beside even a tiny foreign kernel lasts two
/// context switches, several times this
/// (docs/benchmarks.md#what-another-contexts-work-does-to-our-kernels-the-physics-the-design-rests-on);
/// a spin loop reads the clock every microsecond or so.
pub(crate) const YIELD_JUMP: std::time::Duration = std::time::Duration::from_micros(50);

/// `yield_ns` that never ends a kernel early.
pub(crate) const NEVER_YIELD: u64 = u64::MAX;

/// Launches one spin kernel of `ns` nanoseconds as `width` one-warp blocks on `stream`;
/// it ends early at a jump of the GPU clock longer than `yield_ns` (a preemption).
pub(crate) fn launch_spin(
    stream: &CudaStream,
    func: &CudaFunction,
    ns: u64,
    yield_ns: u64,
    width: u32,
) -> Result<(), CudaError> {
    let cfg = LaunchConfig {
        grid_dim: (width, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `spin` and `spin_sleep` take exactly two `.u64` parameters (checked by the
    // ptx tests); `ns` and `yield_ns` are u64s that live until `launch` returns, which
    // copies them. The kernel touches no memory, so no argument can be misused.
    unsafe {
        stream
            .launch_builder(func)
            .arg(&ns)
            .arg(&yield_ns)
            .launch(cfg)
    }
    .map(|_| ())
    .map_err(|e| CudaError::driver("cuLaunchKernel", e))
}
