/* Finding the real driver and attaching the allocation's region (lazily, on
 * the first CUDA call, so LD_PRELOAD costs nothing in non-CUDA processes). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_shim.h"

hami_cuda_real hami_real;
void *hami_cuda_driver;
int hami_cuda_ready;
hami_ptrmap hami_cuda_ptrs;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *const MEMORY_VARS[] = {"HAMI_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT", NULL};
static const char *const CORE_VARS[] = {"HAMI_DEVICE_CORE_LIMIT", "CUDA_DEVICE_SM_LIMIT", NULL};
static const char *const REGION_VARS[] = {"HAMI_REGION_PATH", "CUDA_DEVICE_MEMORY_SHARED_CACHE", NULL};

void *hami_real_dlsym(void *handle, const char *name) {
    /* glibc >= 2.34 versions dlsym GLIBC_2.34; older ones GLIBC_2.2.5. dlvsym
     * is not interposed, so this reaches libc's dlsym, never ours. */
    static void *(*real)(void *, const char *);
    if (!real) {
        real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return real ? real(handle, name) : NULL;
}

static void after_fork_child(void) {
    /* Device memory does not survive fork: the child's maps and locks start fresh. */
    hami_ptrmap_after_fork(&hami_cuda_ptrs);
    hami_cuda_memory_after_fork();
    hami_cuda_vmm_after_fork();
    hami_cuda_array_after_fork();
    hami_cuda_pool_after_fork();
    hami_cuda_graph_after_fork();
    hami_cuda_limits_after_fork();
    hami_cuda_pace_after_fork();
}

/* UUID and PCI bus id of a CUDA ordinal, for the NVML utilization source and the NVML memory wrappers. */
int hami_cuda_identity(int device, char *uuid, size_t uuid_len, char *bus_id, size_t bus_len) {
    CUdevice dev = device;
    if (hami_real.cuDeviceGet) {
        CUresult rc = hami_real.cuDeviceGet(&dev, device);
        if (rc == CUDA_ERROR_NOT_INITIALIZED) return -1;
        if (rc != CUDA_SUCCESS) return 0;
    }
    CUuuid u;
    if (hami_real.cuDeviceGetUuid_v2 && hami_real.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(uuid, uuid_len,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    if (hami_real.cuDeviceGetPCIBusId && hami_real.cuDeviceGetPCIBusId(bus_id, (int)bus_len, dev) != CUDA_SUCCESS)
        bus_id[0] = '\0';
    return 0;
}

static void init_once(void) {
    /* The application (or the CUDA runtime) may have dlopen'ed the driver
     * privately, out of RTLD_NEXT's reach; open it by soname instead. */
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY);
    hami_cuda_driver = h;
    if (!h) {
        fprintf(stderr, "[hami-limiter/CUDA] cannot load libcuda.so.1: %s\n", dlerror());
    } else {
#define HAMI_RESOLVE(name) hami_real.name = (__typeof__(&name))hami_real_dlsym(h, #name);
        HAMI_CUDA_WRAPPED(HAMI_RESOLVE)
        HAMI_CUDA_USED(HAMI_RESOLVE)
        /* CUDA 12.8 added cuEventElapsedTime_v2 (CUDA 13's cuda.h maps the name to it); same signature. */
        void *elapsed_v2 = hami_real_dlsym(h, "cuEventElapsedTime_v2");
        if (elapsed_v2) hami_real.cuEventElapsedTime = (__typeof__(&cuEventElapsedTime))elapsed_v2;
        if (!hami_real.cuDeviceGetUuid_v2) /* drivers before CUDA 11.4: same signature, older name */
            hami_real.cuDeviceGetUuid_v2 = (__typeof__(&cuDeviceGetUuid_v2))hami_real_dlsym(h, "cuDeviceGetUuid");
    }
    hami_busy_set_identity(hami_cuda_identity);
    hami_shim_config cfg = {
        .tag = "CUDA",
        .memory_vars = MEMORY_VARS,
        .core_vars = CORE_VARS,
        .region_vars = REGION_VARS,
        .busy_source = hami_default_busy_source(1),
        .device_busy_source = hami_default_device_busy_source(1),
    };
    hami_shim_setup(&cfg);
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&hami_cuda_ready, 1, __ATOMIC_RELEASE);
}

void hami_cuda_init(void) { pthread_once(&g_once, init_once); }

HAMI_EXPORT CUresult cuInit(unsigned int Flags) {
    hami_cuda_ensure();
    /* A broken region refuses the workload up front, not at its first allocation. */
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuInit ? hami_real.cuInit(Flags) : CUDA_ERROR_NOT_INITIALIZED;
}
