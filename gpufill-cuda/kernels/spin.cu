// gpufill's spin kernels. Compiled to gpufill-cuda/kernels/spin.ptx (see gpufill-cuda/kernels/README.md), which
// gpufill-cuda embeds and the driver JIT-compiles for the GPU at hand.
//
// Each thread busy-waits on %globaltimer, the GPU's nanosecond wall clock, until
// `spin_ns` nanoseconds have passed since its first read. A wall-clock wait keeps the
// kernel's length fixed whatever the SM clock (DVFS).
//
// Without MPS the GPU time-slices between contexts: when another context has work, ours
// is preempted at the end of a time slice, and the other context runs. The thread then
// sees the clock jump between two of its reads. A jump longer than `yield_ns` ends the
// kernel at once: someone else is working, so our kernel gets out of their way instead
// of taking the rest of its length back, and the host sees a kernel shorter than it
// asked for (timing events around it), which says that someone else ran. `yield_ns` of
// ~0ull turns this off.
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

// Busy-waits `spin_ns` nanoseconds, or until the clock jumps by more than `yield_ns`.
extern "C" __global__ void spin(unsigned long long spin_ns, unsigned long long yield_ns)
{
    const unsigned long long start = globaltimer_ns();
    unsigned long long last = start, t;
    while ((t = globaltimer_ns()) - start < spin_ns) {
        if (t - last > yield_ns) {
            return;
        }
        last = t;
    }
}

// Same wait, but each warp naps ~200 ns (between 0 and 400 ns, per the CUDA docs of
// __nanosleep) per iteration: fewer issue slots and less power for the same residency.
// Needs sm_70.
extern "C" __global__ void spin_sleep(unsigned long long spin_ns, unsigned long long yield_ns)
{
    const unsigned long long start = globaltimer_ns();
    unsigned long long last = start, t;
    while ((t = globaltimer_ns()) - start < spin_ns) {
        if (t - last > yield_ns) {
            return;
        }
        last = t;
        __nanosleep(200);
    }
}
