/* Device time from NVML on real NVIDIA hosts.  NVML's per-device utilization
 * (percent of time a kernel ran over its last sample period) is integrated
 * into a running busy-time counter.  It is device-wide, so a device shared by
 * several allocations over-counts each; and the NVML index is taken to be the
 * CUDA ordinal (true unless CUDA_VISIBLE_DEVICES reorders devices). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "shim_core.h"

typedef struct { unsigned int gpu, memory; } nvml_utilization;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_util_fn)(void *, nvml_utilization *);

static nvml_handle_fn g_handle;
static nvml_util_fn g_util;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_busy[HAMI_REGION_MAX_DEVICES], g_last[HAMI_REGION_MAX_DEVICES];

static void load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return;
    nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
    g_handle = (nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    g_util = (nvml_util_fn)dlsym(h, "nvmlDeviceGetUtilizationRates");
    if (!init || !g_handle || !g_util || init() != 0) g_util = NULL;
}

uint64_t hami_busy_from_nvml(const hami_region *r, int device) {
    pthread_once(&g_once, load);
    if (!g_util || device < 0 || device >= HAMI_REGION_MAX_DEVICES) return UINT64_MAX;
    void *dev;
    nvml_utilization u;
    if (g_handle((unsigned)device, &dev) != 0 || g_util(dev, &u) != 0) return UINT64_MAX;
    uint64_t now = hami_now_ns();
    pthread_mutex_lock(&g_mu);
    if (g_last[device]) g_busy[device] += (now - g_last[device]) * u.gpu / 100;
    g_last[device] = now;
    uint64_t b = g_busy[device];
    pthread_mutex_unlock(&g_mu);
    return b;
}

hami_busy_source_fn hami_default_busy_source(int allow_nvml) {
    const char *fake = getenv("HAMI_FAKE_GPU_STATE");
    if (fake && *fake) return hami_busy_from_fake_state;
    return allow_nvml ? hami_busy_from_nvml : NULL;
}
