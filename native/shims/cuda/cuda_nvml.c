/* NVML memory queries made inside the workload (nvidia-smi, pynvml, DCGM
 * clients, frameworks' memory reports) answer with the allocation's grant:
 * total = its limit, used = what the allocation's processes hold, free = the
 * rest.  The CUDA shim exports the two functions and hands them out through
 * its dlsym, so both linked and dlopen'ed NVML are covered.
 *
 * An NVML device is matched to the allocation's device by UUID: against the
 * process's CUDA devices when CUDA is initialised, else against
 * CUDA_VISIBLE_DEVICES (the allocation sets UUIDs; a numeric entry is taken
 * as an NVML index, as with CUDA_DEVICE_ORDER=PCI_BUS_ID).  A device the
 * allocation does not hold is reported as the driver reports it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"
#include "hami_nvml_api.h"

#define CACHE 64

static struct {
    __typeof__(&nvmlDeviceGetMemoryInfo) info;
    __typeof__(&nvmlDeviceGetMemoryInfo_v2) info_v2;
    __typeof__(&nvmlDeviceGetUUID) uuid;
    __typeof__(&nvmlDeviceGetIndex) index;
} nv;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    nvmlDevice_t dev;
    int region_device;
} g_cache[CACHE];
static int g_cached;

static void *real_nvml(void *lib, const char *name) {
    void *f = lib ? hami_real_dlsym(lib, name) : NULL;
    return f ? f : hami_real_dlsym(RTLD_NEXT, name);
}

static void load(void) {
    /* The application's NVML (already loaded: it is calling it), by soname or next in line. */
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
    nv.info = (__typeof__(nv.info))real_nvml(lib, "nvmlDeviceGetMemoryInfo");
    nv.info_v2 = (__typeof__(nv.info_v2))real_nvml(lib, "nvmlDeviceGetMemoryInfo_v2");
    nv.uuid = (__typeof__(nv.uuid))real_nvml(lib, "nvmlDeviceGetUUID");
    nv.index = (__typeof__(nv.index))real_nvml(lib, "nvmlDeviceGetIndex");
}

static int uuid_matches(const char *uuid, const char *entry, size_t len) {
    /* CUDA accepts a unique prefix of a UUID in CUDA_VISIBLE_DEVICES. */
    return uuid[0] && len >= 5 && strncasecmp(uuid, entry, len) == 0;
}

static int by_visible_devices(const char *uuid, int have_index, unsigned int index) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) return -2; /* no list: every device is visible */
    int position = 0;
    for (const char *p = v; *p; position++) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!strncasecmp(p, "GPU-", 4) || !strncasecmp(p, "MIG-", 4)) {
            if (uuid_matches(uuid, p, len)) return position;
        } else if (len && p[0] >= '0' && p[0] <= '9') {
            if (have_index && strtoul(p, NULL, 10) == index) return position;
        } else {
            break; /* CUDA stops at an invalid entry */
        }
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

/* The allocation's device an NVML device is, or -1. */
static int region_device_of(nvmlDevice_t dev) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_cached; i++) {
        if (g_cache[i].dev == dev) {
            int found = g_cache[i].region_device;
            pthread_mutex_unlock(&g_mu);
            return found;
        }
    }
    pthread_mutex_unlock(&g_mu);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    if (!nv.uuid || nv.uuid(dev, uuid, sizeof uuid) != NVML_SUCCESS) uuid[0] = '\0';
    unsigned int index = 0;
    int have_index = nv.index && nv.index(dev, &index) == NVML_SUCCESS;
    int found = -1, count = 0;
    if (uuid[0] && hami_real.cuDeviceGetCount && hami_real.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
        for (int i = 0; i < count && found < 0; i++) {
            char cu_uuid[96] = "", bus[32] = "";
            if (hami_cuda_identity(i, cu_uuid, sizeof cu_uuid, bus, sizeof bus) == 0 && cu_uuid[0] &&
                !strcasecmp(cu_uuid, uuid))
                found = i;
        }
    }
    if (found < 0) {
        found = by_visible_devices(uuid, have_index, index);
        if (found == -2) found = have_index ? (int)index : -1;
    }
    pthread_mutex_lock(&g_mu);
    if (g_cached < CACHE) {
        g_cache[g_cached].dev = dev;
        g_cache[g_cached].region_device = found;
        g_cached++;
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}

/* The grant of an NVML device: its limit and what the allocation holds; 0 when not governed. */
static int grant_of(nvmlDevice_t dev, uint64_t *limit, uint64_t *used) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE) return 0;
    int d = region_device_of(dev);
    hami_region *r = hami_g_shim.region;
    if (d < 0 || d >= r->device_count) return 0;
    *limit = __atomic_load_n(&r->shm->dev[d].memory_limit, __ATOMIC_ACQUIRE);
    if (!*limit) return 0;
    hami_cuda_pools_settle(0);
    *used = __atomic_load_n(&r->shm->dev[d].memory_used, __ATOMIC_ACQUIRE);
    return 1;
}

static void clamp(unsigned long long *total, unsigned long long *free_, unsigned long long *used, uint64_t limit,
                  uint64_t held) {
    uint64_t t = *total < limit ? *total : limit;
    uint64_t u = held < t ? held : t;
    uint64_t f = t - u;
    *total = t;
    *used = u;
    if (*free_ > f) *free_ = f; /* the device may have less free than the grant leaves */
}

HAMI_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    pthread_once(&g_once, load);
    if (!nv.info) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t rc = nv.info(device, memory);
    if (rc != NVML_SUCCESS || !memory) return rc;
    hami_cuda_ensure();
    uint64_t limit, held;
    if (grant_of(device, &limit, &held)) clamp(&memory->total, &memory->free, &memory->used, limit, held);
    return rc;
}

HAMI_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    pthread_once(&g_once, load);
    if (!nv.info_v2) return NVML_ERROR_NOT_SUPPORTED; /* as an old driver without it answers */
    nvmlReturn_t rc = nv.info_v2(device, memory);
    if (rc != NVML_SUCCESS || !memory) return rc;
    hami_cuda_ensure();
    uint64_t limit, held;
    if (grant_of(device, &limit, &held)) {
        clamp(&memory->total, &memory->free, &memory->used, limit, held);
        memory->reserved = 0; /* the driver's reservation is not part of the grant */
    }
    return rc;
}

void *hami_nvml_wrapper_for(const char *name) {
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo")) return (void *)nvmlDeviceGetMemoryInfo;
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo_v2")) return (void *)nvmlDeviceGetMemoryInfo_v2;
    return NULL;
}
