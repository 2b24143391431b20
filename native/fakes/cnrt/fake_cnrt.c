/* A fake Cambricon CNRT runtime (libcnrt.so) for tests, on the shared fake
 * device state of hami_fake_gpu.h.  Standalone: it does not call libcndrv. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "hami_cnrt_api.h"
#include "hami_fake_gpu.h"
#include "hami_fake_visible.h"
#include "ptrmap.h"

#define EXPORT __attribute__((visibility("default")))

static hami_fake_gpu_state *g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hami_fake_proc *g_proc[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_ptrmap g_ptrs;
static uint64_t g_next_addr = 0x500000000000ull;
static uint64_t g_default_ns;
static __thread int t_dev; /* CNRT uses device 0 until cnrtSetDevice */
static __thread uint64_t t_kernel_ns = UINT64_MAX;

static void after_fork_child(void) {
    memset(g_proc, 0, sizeof g_proc);
    hami_ptrmap_after_fork(&g_ptrs);
}

/* Device ordinal -> fake-state device: MLU_VISIBLE_DEVICES (or the pin HAMI_FAKE_CAMBRICON_VISIBLE_DEVICES),
 * see hami_fake_visible.h. */
static int g_order[HAMI_FAKE_GPU_MAX_DEVICES];
static int g_count;

static hami_fake_device *dev_of(int ordinal) { return &g_state->devices[g_order[ordinal]]; }

static void attach(void) {
    g_state = hami_fake_gpu_attach("CAMBRICON");
    if (g_state)
        g_count = hami_fake_visible("CAMBRICON", "MLU_VISIBLE_DEVICES", g_state->device_count, NULL, g_order,
                                    HAMI_FAKE_GPU_MAX_DEVICES);
    g_default_ns = hami_fake_default_kernel_ns();
    pthread_atfork(NULL, NULL, after_fork_child);
}

static int ready(void) {
    pthread_once(&g_once, attach);
    return g_state != NULL && g_count > 0;
}

static hami_fake_proc *proc_of(int dev) {
    if (!g_proc[dev]) g_proc[dev] = hami_fake_proc_slot(dev_of(dev), (int32_t)getpid());
    return g_proc[dev];
}

EXPORT void hamiFakeCnrtSetKernelNs(uint64_t ns) { t_kernel_ns = ns; }

EXPORT cnrtRet_t cnrtGetDeviceCount(unsigned int *count) {
    if (!ready()) return cnrtErrorNoDevice;
    *count = (unsigned int)g_count;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtSetDevice(int device) {
    if (!ready()) return cnrtErrorNoDevice;
    if (device < 0 || device >= g_count) return cnrtErrorArgsInvalid;
    t_dev = device;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtGetDevice(int *device) {
    *device = t_dev;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes) {
    if (!ready()) return cnrtErrorNoDevice;
    if (!pPtr || bytes == 0) return cnrtErrorArgsInvalid;
    hami_fake_device *d = dev_of(t_dev);
    if (hami_fake_mem_take(d, proc_of(t_dev), bytes) != 0 &&
        (hami_fake_reap_dead(d) == 0 || hami_fake_mem_take(d, proc_of(t_dev), bytes) != 0))
        return cnrtErrorNoMem;
    uint64_t addr = __atomic_fetch_add(&g_next_addr, (bytes + 511) & ~(size_t)511, __ATOMIC_RELAXED);
    hami_ptrmap_put(&g_ptrs, addr, bytes, t_dev);
    *pPtr = (void *)(uintptr_t)addr;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtFree(void *ptr) {
    uint64_t size;
    int32_t dev;
    if (!ready() || hami_ptrmap_take(&g_ptrs, (uint64_t)(uintptr_t)ptr, &size, &dev) != 0)
        return cnrtErrorArgsInvalid;
    hami_fake_mem_give(dev_of(dev), proc_of(dev), size);
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtMemGetInfo(size_t *free_, size_t *total) {
    if (!ready()) return cnrtErrorNoDevice;
    hami_fake_device *d = dev_of(t_dev);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    *total = d->total_bytes;
    *free_ = used < d->total_bytes ? d->total_bytes - used : 0;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtInvokeKernel(const void *kernel, cnrtDim3_t dim, cnrtFunctionType_t ktype, void **args,
                                  size_t reserved, cnrtQueue_t queue) {
    if (!ready()) return cnrtErrorNoDevice;
    hami_fake_run_kernel(dev_of(t_dev), proc_of(t_dev),
                         t_kernel_ns != UINT64_MAX ? t_kernel_ns : g_default_ns);
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue) {
    *pQueue = (cnrtQueue_t)(uintptr_t)1;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueSync(cnrtQueue_t queue) {
    if (ready()) hami_fake_synchronize(dev_of(t_dev), proc_of(t_dev));
    return cnrtSuccess;
}
