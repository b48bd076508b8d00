// gpufill's spin kernels. Compiled to gpufill-cuda/kernels/spin.ptx (see gpufill-cuda/kernels/README.md), which
// gpufill-cuda embeds and the driver JIT-compiles for the GPU at hand.
//
// Each thread busy-waits on %globaltimer, the GPU's nanosecond wall clock, until
// `spin_ns` nanoseconds have passed since its first read. A wall-clock wait keeps the
// kernel's length fixed whatever the SM clock (DVFS) and even if the kernel is
// preempted by another context: it still ends at its deadline.
//
// Deliberately absent: memory accesses, local memory, stack, printf, malloc. The
// context can then run with CU_LIMIT_STACK_SIZE = 0, which halves its memory.

__device__ __forceinline__ unsigned long long globaltimer_ns()
{
    unsigned long long t;
    // volatile: every read must happen; the compiler may not hoist it out of the loop.
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Busy-waits `spin_ns` nanoseconds.
extern "C" __global__ void spin(unsigned long long spin_ns)
{
    const unsigned long long start = globaltimer_ns();
    while (globaltimer_ns() - start < spin_ns) {
    }
}

// Same wait, but each warp naps ~200 ns (between 0 and 400 ns, per the CUDA docs of
// __nanosleep) per iteration: fewer issue slots and less power for the same residency.
// Needs sm_70.
extern "C" __global__ void spin_sleep(unsigned long long spin_ns)
{
    const unsigned long long start = globaltimer_ns();
    while (globaltimer_ns() - start < spin_ns) {
        __nanosleep(200);
    }
}
