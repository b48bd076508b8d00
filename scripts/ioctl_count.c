// ioctl_count: an LD_PRELOAD shim that counts a process's ioctls and the thread CPU
// they take, by request and, for the NVIDIA driver's RM control escape (0x2a), by
// control command: where the CPU of NVML and CUDA calls goes, with no profiler.
//
//   gcc -O2 -shared -fPIC -o /tmp/ioctl_count.so scripts/ioctl_count.c -ldl
//   LD_PRELOAD=/tmp/ioctl_count.so IOCTL_COUNT_OUT=/tmp/counts.txt gpufill run ...
//   kill -USR2 PID   # first: zero the counts; each later one: append them to the file
//
// Each line: request (hex), RM control command (hex, or -), calls, thread CPU in us,
// and the thread's name. Scripts/ioctl_profile.py drives it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 512
struct slot {
    unsigned long req;
    uint32_t cmd;
    char thread[16];
    unsigned long calls;
    uint64_t ns;
};
static struct slot tab[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int (*real_ioctl)(int, unsigned long, void *);
static int dumps;

static uint64_t thread_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void dump(int sig)
{
    (void)sig;
    pthread_mutex_lock(&mu);
    if (dumps++ > 0) {
        const char *path = getenv("IOCTL_COUNT_OUT");
        FILE *f = fopen(path ? path : "/tmp/ioctl_count.txt", "a");
        if (f) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            fprintf(f, "# dump %d at %.3f\n", (int)dumps - 1, t.tv_sec + t.tv_nsec / 1e9);
            for (int i = 0; i < SLOTS; i++)
                if (tab[i].calls)
                    fprintf(f, "%lx %x %lu %.1f %s\n", tab[i].req, tab[i].cmd, tab[i].calls,
                            tab[i].ns / 1e3, tab[i].thread);
            fclose(f);
        }
    }
    memset(tab, 0, sizeof tab);
    pthread_mutex_unlock(&mu);
}

// SIGUSR2 is blocked in every thread (threads inherit the mask) and taken by a thread
// of ours with sigwait, so a dump never interrupts an ioctl holding the lock.
static void *dumper(void *set)
{
    for (;;) {
        int sig;
        if (sigwait((sigset_t *)set, &sig) == 0) dump(sig);
    }
    return 0;
}

__attribute__((constructor)) static void init(void)
{
    static sigset_t set;
    real_ioctl = (int (*)(int, unsigned long, void *))dlsym(RTLD_NEXT, "ioctl");
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, 0);
    pthread_t t;
    pthread_create(&t, 0, dumper, &set);
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    uint64_t t0 = thread_ns();
    int r = real_ioctl(fd, req, arg);
    uint64_t spent = thread_ns() - t0;
    // NV_ESC_RM_CONTROL: NVOS54_PARAMETERS { hClient, hObject, cmd, ... }.
    uint32_t cmd = ((req & 0xff) == 0x2a && arg) ? ((uint32_t *)arg)[2] : 0;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    pthread_mutex_lock(&mu);
    unsigned h = (unsigned)((req * 31 + cmd) * 2654435761u + name[0] + name[8]) % SLOTS;
    for (int i = 0; i < SLOTS; i++, h = (h + 1) % SLOTS) {
        struct slot *s = &tab[h];
        if (s->calls == 0) {
            s->req = req;
            s->cmd = cmd;
            memcpy(s->thread, name, sizeof name);
        }
        if (s->req == req && s->cmd == cmd && !strncmp(s->thread, name, sizeof name)) {
            s->calls++;
            s->ns += spent;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}
