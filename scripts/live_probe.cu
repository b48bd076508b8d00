// live_probe: one spin kernel of ours in flight at a time (gpufill's fill-beside shape),
// with CUDA timing events around each kernel, to find out whether another context's
// work shows in our kernels' start times, what that costs in CPU, and what an NVML
// process-list read costs. Issue 21's first GPU probe; scripts/live_probe.py drives it.
//
// Build on the GPU machine: nvcc -O2 -arch=sm_90 -o /tmp/live_probe scripts/live_probe.cu -lcuda -ldl
//
//   live_probe pace PTX KERNEL_US GAP_US SECONDS OUT.csv
//       one kernel at a time, each preceded by timing event S and followed by E; rows:
//       n,tb_ns,ta_ns,tdone_ns,ds_us,dk_us,late_at_check
//       (tb/ta: host CLOCK_MONOTONIC just before / after cuLaunchKernel; ds: GPU time
//       from the previous S to this S; dk: from S to E; tdone: when the host first saw E
//       complete). Last line: "# cpu_thread_us=... cpu_process_us=... kernels=..."
//   live_probe nvml N
//       N calls of each NVML call gpufill makes, and of a sleep: thread CPU, wall time
//       and voluntary context switches (sleeps) per call.
//   live_probe burst KERNEL_US PERIOD_MS DUTY SECONDS OUT.csv
//       bursts with a timing event before each kernel (see burst()).
//   live_probe gaps OUT.csv REPS GAP_S...
//       after each idle gap, a pair of tiny kernels (see gaps()).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define CK(x)                                                                   \
    do {                                                                        \
        CUresult r_ = (x);                                                      \
        if (r_ != CUDA_SUCCESS) {                                               \
            const char *s_ = 0;                                                 \
            cuGetErrorString(r_, &s_);                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);      \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int64_t cpu_us(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (int64_t)t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

static void sleep_until(int64_t ns)
{
    struct timespec t;
    t.tv_sec = ns / 1000000000LL;
    t.tv_nsec = ns % 1000000000LL;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, 0) != 0) {
    }
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = (char *)malloc(n + 1);
    if (fread(buf, 1, n, f) != (size_t)n) {
        perror("read");
        exit(1);
    }
    buf[n] = 0;
    fclose(f);
    return buf;
}

struct Ctx {
    CUstream st;
    CUfunction exitk;
};
static Ctx open_ctx(void);

static int pace(const char *ptx, long kernel_us, long gap_us, double seconds, const char *out)
{
    Ctx c = open_ctx();
    CUmodule mod;
    CUfunction fn;
    CK(cuModuleLoadData(&mod, read_file(ptx)));
    CK(cuModuleGetFunction(&fn, mod, "spin_sleep"));
    CUstream st = c.st;
    CUevent S[2], E[2];
    for (int i = 0; i < 2; i++) {
        CK(cuEventCreate(&S[i], CU_EVENT_DEFAULT));
        CK(cuEventCreate(&E[i], CU_EVENT_DEFAULT));
    }
    FILE *f = fopen(out, "w");
    fprintf(f, "n,tb_ns,ta_ns,tdone_ns,ds_us,dk_us,late_at_check\n");
    unsigned long long spin_ns = (unsigned long long)kernel_us * 1000ULL, never = ~0ULL;
    void *params[] = {&spin_ns, &never};
    // Warm up: one kernel, synchronised.
    CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, st, params, 0));
    CK(cuStreamSynchronize(st));
    int64_t t_end = mono_ns() + (int64_t)(seconds * 1e9);
    int64_t cpu_t0 = cpu_us(CLOCK_THREAD_CPUTIME_ID), cpu_p0 = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
    long n = 0;
    while (mono_ns() < t_end) {
        int i = n & 1;
        CK(cuEventRecord(S[i], st));
        int64_t tb = mono_ns();
        CK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, st, params, 0));
        int64_t ta = mono_ns();
        CK(cuEventRecord(E[i], st));
        sleep_until(ta + (kernel_us + gap_us) * 1000LL);
        int late = 0;
        CUresult q = cuEventQuery(E[i]);
        while (q == CUDA_ERROR_NOT_READY) {
            late = 1;
            sleep_until(mono_ns() + 20000);
            q = cuEventQuery(E[i]);
        }
        CK(q);
        int64_t tdone = mono_ns();
        float ds = 0, dk = 0;
        if (n > 0) CK(cuEventElapsedTime(&ds, S[1 - i], S[i]));
        CK(cuEventElapsedTime(&dk, S[i], E[i]));
        fprintf(f, "%ld,%lld,%lld,%lld,%.3f,%.3f,%d\n", n, (long long)tb, (long long)ta,
                (long long)tdone, ds * 1000.0, dk * 1000.0, late);
        if (late) sleep_until(mono_ns() + gap_us * 1000LL);
        n++;
    }
    int64_t cpu_t = cpu_us(CLOCK_THREAD_CPUTIME_ID) - cpu_t0;
    int64_t cpu_p = cpu_us(CLOCK_PROCESS_CPUTIME_ID) - cpu_p0;
    fprintf(f, "# cpu_thread_us=%lld cpu_process_us=%lld kernels=%ld seconds=%.3f\n",
            (long long)cpu_t, (long long)cpu_p, n, seconds);
    fclose(f);
    CK(cuCtxSynchronize());
    return 0;
}

// A spin that ends at once when it sees the GPU clock jump by more than `jump_ns`
// between two of its reads: it was preempted, so another context ran meanwhile. The
// host sees that as a kernel shorter than planned (timing events around it).
__device__ __forceinline__ unsigned long long gt(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void spin_exit(unsigned long long ns, unsigned long long jump_ns)
{
    unsigned long long start = gt(), last = start, t;
    while ((t = gt()) - start < ns) {
        if (t - last > jump_ns) return;
        last = t;
        __nanosleep(200);
    }
}

static Ctx open_ctx(void)
{
    Ctx c;
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0));
    int least, greatest;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CK(cuStreamCreateWithPriority(&c.st, CU_STREAM_NON_BLOCKING, least));
    if (cudaGetFuncBySymbol(&c.exitk, (const void *)spin_exit) != cudaSuccess) exit(3);
    return c;
}

static void launch_exit(Ctx &c, unsigned long long ns)
{
    // JUMP_NS: the clock jump that ends a kernel early (default 20 us; huge = never).
    static unsigned long long jump = getenv("JUMP_NS") ? strtoull(getenv("JUMP_NS"), 0, 10) : 20000;
    void *params[] = {&ns, &jump};
    CK(cuLaunchKernel(c.exitk, 1, 1, 1, 32, 1, 1, 0, c.st, params, 0));
}

static void wait_event(CUevent e)
{
    CUresult q;
    while ((q = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) sleep_until(mono_ns() + 10000);
    CK(q);
}

// Bursts as gpufill launches them on an empty GPU: every PERIOD, N kernels of K us
// back to back (N = duty x period / K), each preceded by a timing event. Rows per
// kernel: burst,i,ta_ns,ds0_us (previous burst's first event to this one's),
// t_us (this burst's first event to this kernel's), dur_us (this kernel's event to the
// next one's, or to the end event).
static int burst(long kernel_us, long period_ms, double duty, double seconds, const char *out)
{
    Ctx c = open_ctx();
    int n = (int)(duty * period_ms * 1000.0 / kernel_us + 0.5);
    if (n < 1) n = 1;
    CUevent ev[2][65];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i <= n; i++) CK(cuEventCreate(&ev[b][i], CU_EVENT_DEFAULT));
    FILE *f = fopen(out, "w");
    fprintf(f, "burst,i,ta_ns,ds0_us,t_us,dur_us\n");
    launch_exit(c, 10000);
    CK(cuStreamSynchronize(c.st));
    int64_t next = mono_ns(), t_end = next + (int64_t)(seconds * 1e9);
    int64_t cpu0 = cpu_us(CLOCK_THREAD_CPUTIME_ID);
    long b = 0;
    while (next < t_end) {
        sleep_until(next);
        CUevent *e = ev[b & 1];
        int64_t ta = 0;
        for (int i = 0; i < n; i++) {
            CK(cuEventRecord(e[i], c.st));
            launch_exit(c, (unsigned long long)kernel_us * 1000ULL);
            if (i == 0) ta = mono_ns();
        }
        CK(cuEventRecord(e[n], c.st));
        wait_event(e[n]);
        float ds0 = 0;
        if (b > 0) CK(cuEventElapsedTime(&ds0, ev[(b - 1) & 1][0], e[0]));
        for (int i = 0; i < n; i++) {
            float t = 0, d = 0;
            CK(cuEventElapsedTime(&t, e[0], e[i]));
            CK(cuEventElapsedTime(&d, e[i], e[i + 1]));
            fprintf(f, "%ld,%d,%lld,%.3f,%.3f,%.3f\n", b, i, (long long)ta, ds0 * 1000.0,
                    t * 1000.0, d * 1000.0);
        }
        b++;
        next += period_ms * 1000000LL;
    }
    fprintf(f, "# cpu_thread_us=%lld bursts=%ld seconds=%.3f\n",
            (long long)(cpu_us(CLOCK_THREAD_CPUTIME_ID) - cpu0), b, seconds);
    fclose(f);
    return 0;
}

// After each gap (seconds, from argv), a pair of tiny kernels: K1, then K2 once K1 has
// finished. K1's lateness against K2 = (ta2 - ta1) - (S2 - S1): whether anyone else ran
// on the GPU since our previous kernel, however long ago.
static int gaps(int count, char **list, int reps, const char *out)
{
    Ctx c = open_ctx();
    CUevent S1, S2, E2;
    CK(cuEventCreate(&S1, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&S2, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&E2, CU_EVENT_DEFAULT));
    FILE *f = fopen(out, "w");
    fprintf(f, "gap_s,rep,end_ns,late_us\n");
    launch_exit(c, 5000);
    CK(cuStreamSynchronize(c.st));
    for (int r = 0; r < reps; r++)
        for (int g = 0; g < count; g++) {
            double gap = atof(list[g]);
            sleep_until(mono_ns() + (int64_t)(gap * 1e9));
            CK(cuEventRecord(S1, c.st));
            launch_exit(c, 5000);
            int64_t ta1 = mono_ns();
            CK(cuEventRecord(S2, c.st));
            wait_event(S2);
            CK(cuEventRecord(S2, c.st));
            launch_exit(c, 5000);
            int64_t ta2 = mono_ns();
            CK(cuEventRecord(E2, c.st));
            wait_event(E2);
            float d = 0;
            CK(cuEventElapsedTime(&d, S1, S2));
            fprintf(f, "%.3f,%d,%lld,%.1f\n", gap, r, (long long)ta2,
                    (ta2 - ta1) / 1e3 - d * 1000.0);
            fflush(f);
        }
    fclose(f);
    return 0;
}

// NVML, loaded at run time (no header needed).
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} proc_v3;

static int nvml(long calls)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "no libnvidia-ml\n");
        return 1;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*get)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*procs)(void *, unsigned *, proc_v3 *) =
        (int (*)(void *, unsigned *, proc_v3 *))dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    int (*util)(void *, unsigned *) = (int (*)(void *, unsigned *))dlsym(h, "nvmlDeviceGetUtilizationRates");
    typedef int (*anyf)(void *, ...);
    struct { const char *name; int kind; } more[] = {
        {"nvmlDeviceGetProcessUtilization", 1}, {"nvmlDeviceGetSamples", 2},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v3", 3}, {"nvmlDeviceGetPowerUsage", 4},
        {"nvmlDeviceGetMemoryInfo", 5}};
    if (!init || !get || !procs || !util || init() != 0) {
        fprintf(stderr, "nvml symbols\n");
        return 1;
    }
    void *dev;
    if (get(0, &dev) != 0) return 1;
    proc_v3 buf[64];
    // CPU and sleeps (voluntary context switches: a call that waits for the GPU's
    // firmware sleeps, and a wake-up costs more CPU than the call) per call.
    struct rusage r0, r1;
    int64_t c0, w0;
#define START() (getrusage(RUSAGE_THREAD, &r0), c0 = cpu_us(CLOCK_THREAD_CPUTIME_ID), w0 = mono_ns())
#define REPORT(name, n, rc)                                                                   \
    (getrusage(RUSAGE_THREAD, &r1),                                                           \
     printf("nvml %-44s cpu %7.2f us/call wall %7.2f us/call sleeps %.3f/call (rc %d)\n", name, \
            (double)(cpu_us(CLOCK_THREAD_CPUTIME_ID) - c0) / (n), (double)(mono_ns() - w0) / 1e3 / (n), \
            (double)(r1.ru_nvcsw - r0.ru_nvcsw) / (n), rc))
    int rc = 0;
    START();
    for (long i = 0; i < calls; i++) {
        unsigned count = 64;
        rc = procs(dev, &count, buf);
    }
    REPORT("ComputeRunningProcesses_v3 (one call, 64 slots)", calls, rc);
    START();
    for (long i = 0; i < calls; i++) {
        unsigned count = 0;
        rc = procs(dev, &count, 0);
    }
    REPORT("ComputeRunningProcesses_v3 (count only)", calls, rc);
    unsigned u[2];
    START();
    for (long i = 0; i < calls; i++) rc = util(dev, u);
    REPORT("UtilizationRates", calls, rc);
    static char big[1 << 20];
    for (unsigned m = 0; m < sizeof(more) / sizeof(more[0]); m++) {
        anyf f = (anyf)dlsym(h, more[m].name);
        if (!f) continue;
        long n = 200;
        START();
        for (long i = 0; i < n; i++) {
            unsigned count = 4096, v = 0;
            switch (more[m].kind) {
            case 1: rc = f(dev, big, &count, 0ULL); break;
            case 2: { int type = 0; rc = f(dev, 1, 0ULL, &type, &count, big); break; }
            case 3: count = 64; rc = f(dev, &count, big); break;
            case 4: rc = f(dev, &v); break;
            case 5: rc = f(dev, big); break;
            }
        }
        REPORT(more[m].name, n, rc);
    }
    // A thread's wake-up: sleeping 50 ms (a tick) and waking, CPU per wake.
    START();
    for (int i = 0; i < 40; i++) {
        struct timespec t = {0, 50 * 1000 * 1000};
        nanosleep(&t, 0);
    }
    REPORT("(none: a 50 ms sleep and its wake-up)", 40, 0);
    START();
    for (int i = 0; i < 200; i++) {
        struct timespec t = {0, 2 * 1000 * 1000};
        nanosleep(&t, 0);
    }
    REPORT("(none: a 2 ms sleep and its wake-up)", 200, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && !strcmp(argv[1], "pace"))
        return pace(argv[2], atol(argv[3]), atol(argv[4]), atof(argv[5]), argv[6]);
    if (argc >= 3 && !strcmp(argv[1], "nvml")) return nvml(atol(argv[2]));
    if (argc >= 7 && !strcmp(argv[1], "burst"))
        return burst(atol(argv[2]), atol(argv[3]), atof(argv[4]), atof(argv[5]), argv[6]);
    if (argc >= 5 && !strcmp(argv[1], "gaps"))
        return gaps(argc - 4, argv + 4, atoi(argv[3]), argv[2]);
    fprintf(stderr, "usage: live_probe pace PTX KERNEL_US GAP_US SECONDS OUT | nvml N\n");
    return 2;
}
