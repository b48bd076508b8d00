/* Hides the NVIDIA driver from a process, so that the tests of what gpufill does without
 * one run on every machine, a GPU machine too. Loaded with LD_PRELOAD, it makes every
 * dlopen of libcuda* or libnvidia-ml* fail as a missing library does, with the loader's
 * own "cannot open shared object file" error.
 *
 * A library path that holds no libcuda is not enough: dlopen by name also searches
 * /etc/ld.so.cache and the system directories, where the driver installs its libraries,
 * and cudarc and nvml-wrapper offer no variable to load them from elsewhere.
 *
 * Built with `cc` (the linker cargo itself uses on Linux) by the tests that use it:
 * gpufill-cuda's `no_driver` test module and gpufill-cli's tests/common. Not built by cargo.
 *
 *   cc -shared -fPIC -o no_driver.so no_driver.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

static int is_the_driver(const char *file) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    return strncmp(base, "libcuda", 7) == 0 || strncmp(base, "libnvidia-ml", 12) == 0;
}

void *dlopen(const char *file, int mode) {
    void *(*real)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    if (file != NULL && is_the_driver(file)) {
        /* A path that cannot exist, so that dlerror() reports a missing file. */
        return real("/nonexistent/hidden-by-gpufill-tests.so", mode);
    }
    return real(file, mode);
}
