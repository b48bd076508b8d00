//! Launching the spin kernel: one place for its launch shape (one warp per block) and
//! the one `unsafe` launch, shared by the bursts ([`crate::launcher`]) and the pacing
//! thread ([`crate::pacing`]).

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use crate::error::CudaError;

/// Threads per block: one warp, the least a kernel can occupy.
const BLOCK_THREADS: u32 = 32;

/// Launches one spin kernel of `ns` nanoseconds as `width` one-warp blocks on `stream`.
pub(crate) fn launch_spin(
    stream: &CudaStream,
    func: &CudaFunction,
    ns: u64,
    width: u32,
) -> Result<(), CudaError> {
    let cfg = LaunchConfig {
        grid_dim: (width, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `spin` and `spin_sleep` take exactly one `.u64` parameter (checked by the
    // ptx tests) and `ns` is a u64 that lives until `launch` returns, which copies it.
    // The kernel touches no memory, so no argument can be misused.
    unsafe { stream.launch_builder(func).arg(&ns).launch(cfg) }
        .map(|_| ())
        .map_err(|e| CudaError::driver("cuLaunchKernel", e))
}
