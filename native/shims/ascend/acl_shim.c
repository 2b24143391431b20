/* The Ascend ACL shim (libhami_ascend.so): aclrtMalloc and its variants,
 * aclrtFree, aclrtGetMemInfo and aclrtLaunchKernel. */
#define _GNU_SOURCE
#include <pthread.h>

#include "hami_acl_api.h"
#include "ptrmap.h"
#include "shim_core.h"
#include "vendor_lib.h"

#define HAMI_EXPORT __attribute__((visibility("default")))
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

static struct {
    __typeof__(&aclrtMalloc) aclrtMalloc;
    __typeof__(&aclrtMallocCached) aclrtMallocCached;
    __typeof__(&aclrtMallocAlign32) aclrtMallocAlign32;
    __typeof__(&aclrtFree) aclrtFree;
    __typeof__(&aclrtGetMemInfo) aclrtGetMemInfo;
    __typeof__(&aclrtLaunchKernel) aclrtLaunchKernel;
    __typeof__(&aclrtGetDevice) aclrtGetDevice;
} real;

static int g_ready;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hami_ptrmap g_ptrs;

static const char *const MEMORY_VARS[] = {"HAMI_DEVICE_MEMORY_LIMIT", NULL};
static const char *const CORE_VARS[] = {"HAMI_DEVICE_CORE_LIMIT", NULL};
static const char *const REGION_VARS[] = {"HAMI_REGION_PATH", NULL};

static void after_fork_child(void) { hami_ptrmap_after_fork(&g_ptrs); }

static void init_once(void) {
    void *h = hami_open_vendor_lib("ASCEND", "libascendcl.so");
    if (h) {
        real.aclrtMalloc = (__typeof__(real.aclrtMalloc))dlsym(h, "aclrtMalloc");
        real.aclrtMallocCached = (__typeof__(real.aclrtMallocCached))dlsym(h, "aclrtMallocCached");
        real.aclrtMallocAlign32 = (__typeof__(real.aclrtMallocAlign32))dlsym(h, "aclrtMallocAlign32");
        real.aclrtFree = (__typeof__(real.aclrtFree))dlsym(h, "aclrtFree");
        real.aclrtGetMemInfo = (__typeof__(real.aclrtGetMemInfo))dlsym(h, "aclrtGetMemInfo");
        real.aclrtLaunchKernel = (__typeof__(real.aclrtLaunchKernel))dlsym(h, "aclrtLaunchKernel");
        real.aclrtGetDevice = (__typeof__(real.aclrtGetDevice))dlsym(h, "aclrtGetDevice");
    }
    hami_shim_config cfg = {"ASCEND", MEMORY_VARS, CORE_VARS, REGION_VARS, hami_default_busy_source(0),
                             hami_default_device_busy_source(0)};
    hami_shim_setup(&cfg);
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
}

static inline void ensure(void) {
    if (UNLIKELY(!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))) pthread_once(&g_once, init_once);
}

static int current_device(void) {
    int32_t d;
    return real.aclrtGetDevice && real.aclrtGetDevice(&d) == ACL_SUCCESS ? d : 0;
}

static aclError alloc_via(__typeof__(&aclrtMalloc) fn, void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    ensure();
    if (UNLIKELY(!fn)) return ACL_ERROR_UNINITIALIZE;
    if (!hami_shim_accounting()) return fn(devPtr, size, policy);
    int dev = current_device();
    if (hami_shim_reserve(dev, size) != HAMI_OK) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    aclError rc = fn(devPtr, size, policy);
    if (rc != ACL_SUCCESS) {
        hami_shim_release(dev, size);
        return rc;
    }
    hami_ptrmap_put(&g_ptrs, (uint64_t)(uintptr_t)*devPtr, size, dev);
    return rc;
}

HAMI_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    ensure();
    return alloc_via(real.aclrtMalloc, devPtr, size, policy);
}

HAMI_EXPORT aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    ensure();
    return alloc_via(real.aclrtMallocCached, devPtr, size, policy);
}

HAMI_EXPORT aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    ensure();
    return alloc_via(real.aclrtMallocAlign32, devPtr, size, policy);
}

HAMI_EXPORT aclError aclrtFree(void *devPtr) {
    ensure();
    if (UNLIKELY(!real.aclrtFree)) return ACL_ERROR_UNINITIALIZE;
    uint64_t size;
    int32_t dev;
    /* Out of the map before the real free: the address may be reused at once. */
    int known = hami_shim_accounting() && hami_ptrmap_take(&g_ptrs, (uint64_t)(uintptr_t)devPtr, &size, &dev) == 0;
    aclError rc = real.aclrtFree(devPtr);
    if (known) {
        if (rc == ACL_SUCCESS)
            hami_shim_release(dev, size);
        else
            hami_ptrmap_put(&g_ptrs, (uint64_t)(uintptr_t)devPtr, size, dev);
    }
    return rc;
}

HAMI_EXPORT aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_, size_t *total) {
    ensure();
    if (UNLIKELY(!real.aclrtGetMemInfo) || hami_g_shim.mode == HAMI_SHIM_BROKEN) return ACL_ERROR_UNINITIALIZE;
    aclError rc = real.aclrtGetMemInfo(attr, free_, total);
    /* The limit governs device memory (HBM); host-side DDR figures pass through. */
    int device_mem = attr == ACL_HBM_MEM || attr == ACL_HBM_MEM_HUGE || attr == ACL_HBM_MEM_NORMAL ||
                     attr == ACL_HBM_MEM_P2P_HUGE || attr == ACL_HBM_MEM_P2P_NORMAL;
    if (rc == ACL_SUCCESS && device_mem && free_ && total) {
        uint64_t f = *free_, t = *total;
        if (hami_shim_clamp_meminfo(current_device(), &f, &t)) {
            *free_ = (size_t)f;
            *total = (size_t)t;
        }
    }
    return rc;
}

HAMI_EXPORT aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t blockDim, const void *argsData,
                                       size_t argsSize, aclrtStream stream) {
    ensure();
    if (UNLIKELY(hami_shim_compute_limited())) hami_shim_throttle(current_device());
    if (UNLIKELY(!real.aclrtLaunchKernel)) return ACL_ERROR_UNINITIALIZE;
    return real.aclrtLaunchKernel(funcHandle, blockDim, argsData, argsSize, stream);
}
