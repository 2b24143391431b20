/* A fake Cambricon CNDrv driver (libcndrv.so) for tests: contexts bound to a
 * device, memory with a capacity, kernels on the shared virtual timeline. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "hami_cndrv_api.h"
#include "hami_fake_gpu.h"
#include "hami_fake_visible.h"
#include "ptrmap.h"

#define EXPORT __attribute__((visibility("default")))

struct CNcontext_st { int device; };

static hami_fake_gpu_state *g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hami_fake_proc *g_proc[HAMI_FAKE_GPU_MAX_DEVICES];
static struct CNcontext_st g_ctx[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_ptrmap g_ptrs;
static uint64_t g_next_addr = 0x400000000000ull;
static uint64_t g_default_ns;
static __thread struct CNcontext_st *t_ctx;
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
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_DEVICES; i++) g_ctx[i].device = i;
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

EXPORT void hamiFakeCndrvSetKernelNs(uint64_t ns) { t_kernel_ns = ns; }

EXPORT CNresult cnInit(int flags) { return ready() ? CN_SUCCESS : CN_ERROR_NOT_INITIALIZED; }

EXPORT CNresult cnDeviceGetCount(int *count) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    *count = g_count;
    return CN_SUCCESS;
}

EXPORT CNresult cnDeviceGet(CNdev *device, int ordinal) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    *device = ordinal;
    return CN_SUCCESS;
}

EXPORT CNresult cnCtxCreate(CNcontext *pctx, unsigned int flags, CNdev dev) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= g_count) return CN_CONTEXT_ERROR_INVALID;
    *pctx = &g_ctx[dev];
    t_ctx = &g_ctx[dev];
    return CN_SUCCESS;
}

EXPORT CNresult cnCtxSetCurrent(CNcontext ctx) {
    t_ctx = ctx;
    return CN_SUCCESS;
}

EXPORT CNresult cnCtxGetDevice(CNdev *device) {
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    *device = t_ctx->device;
    return CN_SUCCESS;
}

EXPORT CNresult cnMalloc(CNaddr *pmluAddr, cn_uint64_t bytes) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    int dev = t_ctx->device;
    hami_fake_device *d = dev_of(dev);
    if (hami_fake_mem_take(d, proc_of(dev), bytes) != 0 &&
        (hami_fake_reap_dead(d) == 0 || hami_fake_mem_take(d, proc_of(dev), bytes) != 0))
        return CN_MEMORY_ERROR_OUT_OF_MEMORY;
    uint64_t addr = __atomic_fetch_add(&g_next_addr, (bytes + 511) & ~(uint64_t)511, __ATOMIC_RELAXED);
    hami_ptrmap_put(&g_ptrs, addr, bytes, dev);
    *pmluAddr = addr;
    return CN_SUCCESS;
}

EXPORT CNresult cnFree(CNaddr addr) {
    uint64_t size;
    int32_t dev;
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (hami_ptrmap_take(&g_ptrs, addr, &size, &dev) != 0) return CN_CONTEXT_ERROR_INVALID;
    hami_fake_mem_give(dev_of(dev), proc_of(dev), size);
    return CN_SUCCESS;
}

EXPORT CNresult cnMemGetInfo(cn_uint64_t *pfreeBytes, cn_uint64_t *ptotalBytes) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    hami_fake_device *d = dev_of(t_ctx->device);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    *ptotalBytes = d->total_bytes;
    *pfreeBytes = used < d->total_bytes ? d->total_bytes - used : 0;
    return CN_SUCCESS;
}

EXPORT CNresult cnInvokeKernel(CNkernel hkernel, unsigned int dimx, unsigned int dimy, unsigned int dimz,
                               KernelClass c, unsigned int reserve, CNqueue hqueue, void **kernelParams,
                               void **extra) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    hami_fake_run_kernel(dev_of(t_ctx->device), proc_of(t_ctx->device),
                         t_kernel_ns != UINT64_MAX ? t_kernel_ns : g_default_ns);
    return CN_SUCCESS;
}
