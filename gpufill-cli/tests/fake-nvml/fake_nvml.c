/* A stand-in libnvidia-ml.so.1 with no GPU: just enough NVML for `gpufill status`
 * (init, the driver version, a device count of 0, shutdown). tests/status.rs builds
 * it with `cc` (the linker Rust itself uses) to show that `status` needs NVML only,
 * not libcuda, as in a container given only the `utility` driver capability. */
#include <string.h>

typedef int nvmlReturn_t;

nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    const char *v = "999.99.99-fake";
    if (length < strlen(v) + 1) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(version, v);
    return 0;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = 0;
    return 0;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    (void)result;
    return "fake NVML error";
}
