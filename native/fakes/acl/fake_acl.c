/* A fake Ascend ACL runtime (libascendcl.so) for tests: devices selected per
 * thread with aclrtSetDevice, HBM with a capacity, and kernels on the shared
 * virtual timeline of hami_fake_gpu.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "hami_acl_api.h"
#include "hami_fake_gpu.h"
#include "hami_fake_visible.h"
#include "ptrmap.h"

#define EXPORT __attribute__((visibility("default")))

static hami_fake_gpu_state *g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hami_fake_proc *g_proc[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_ptrmap g_ptrs;
static uint64_t g_next_addr = 0x600000000000ull;
static uint64_t g_default_ns;
static __thread int t_dev = -1;
static __thread uint64_t t_kernel_ns = UINT64_MAX;

static void after_fork_child(void) {
    memset(g_proc, 0, sizeof g_proc);
    hami_ptrmap_after_fork(&g_ptrs);
}

/* Device id -> fake-state device: ASCEND_RT_VISIBLE_DEVICES (or the pin HAMI_FAKE_ASCEND_VISIBLE_DEVICES),
 * see hami_fake_visible.h. */
static int g_order[HAMI_FAKE_GPU_MAX_DEVICES];
static int g_count;

static hami_fake_device *dev_of(int id) { return &g_state->devices[g_order[id]]; }

static void attach(void) {
    g_state = hami_fake_gpu_attach("ASCEND");
    if (g_state)
        g_count = hami_fake_visible("ASCEND", "ASCEND_RT_VISIBLE_DEVICES", g_state->device_count, NULL, g_order,
                                    HAMI_FAKE_GPU_MAX_DEVICES);
    g_default_ns = hami_fake_default_kernel_ns();
    pthread_atfork(NULL, NULL, after_fork_child);
}

static int ready(void) {
    pthread_once(&g_once, attach);
    return g_state != NULL;
}

static hami_fake_proc *proc_of(int dev) {
    if (!g_proc[dev]) g_proc[dev] = hami_fake_proc_slot(dev_of(dev), (int32_t)getpid());
    return g_proc[dev];
}

EXPORT void hamiFakeAclSetKernelNs(uint64_t ns) { t_kernel_ns = ns; }

EXPORT aclError aclInit(const char *configPath) { return ready() ? ACL_SUCCESS : ACL_ERROR_UNINITIALIZE; }
EXPORT aclError aclFinalize(void) { return ACL_SUCCESS; }

EXPORT aclError aclrtGetDeviceCount(uint32_t *count) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    *count = (uint32_t)g_count;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSetDevice(int32_t deviceId) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (deviceId < 0 || deviceId >= g_count) return ACL_ERROR_INVALID_PARAM;
    t_dev = deviceId;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtResetDevice(int32_t deviceId) { return ACL_SUCCESS; }

EXPORT aclError aclrtGetDevice(int32_t *deviceId) {
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    *deviceId = t_dev;
    return ACL_SUCCESS;
}

static aclError do_alloc(void **devPtr, size_t size) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    if (!devPtr || size == 0) return ACL_ERROR_INVALID_PARAM;
    hami_fake_device *d = dev_of(t_dev);
    if (hami_fake_mem_take(d, proc_of(t_dev), size) != 0 &&
        (hami_fake_reap_dead(d) == 0 || hami_fake_mem_take(d, proc_of(t_dev), size) != 0))
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    uint64_t addr = __atomic_fetch_add(&g_next_addr, (size + 511) & ~(size_t)511, __ATOMIC_RELAXED);
    hami_ptrmap_put(&g_ptrs, addr, size, t_dev);
    *devPtr = (void *)(uintptr_t)addr;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) { return do_alloc(devPtr, size); }
EXPORT aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    return do_alloc(devPtr, size);
}
EXPORT aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    return do_alloc(devPtr, size);
}

EXPORT aclError aclrtFree(void *devPtr) {
    uint64_t size;
    int32_t dev;
    if (!ready() || hami_ptrmap_take(&g_ptrs, (uint64_t)(uintptr_t)devPtr, &size, &dev) != 0)
        return ACL_ERROR_INVALID_PARAM;
    hami_fake_mem_give(dev_of(dev), proc_of(dev), size);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_, size_t *total) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    hami_fake_device *d = dev_of(t_dev);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    *total = d->total_bytes;
    *free_ = used < d->total_bytes ? d->total_bytes - used : 0;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t blockDim, const void *argsData,
                                  size_t argsSize, aclrtStream stream) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    hami_fake_run_kernel(dev_of(t_dev), proc_of(t_dev),
                         t_kernel_ns != UINT64_MAX ? t_kernel_ns : g_default_ns);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtCreateStream(aclrtStream *stream) {
    *stream = (aclrtStream)(uintptr_t)1;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
    if (ready() && t_dev >= 0) hami_fake_synchronize(dev_of(t_dev), proc_of(t_dev));
    return ACL_SUCCESS;
}
