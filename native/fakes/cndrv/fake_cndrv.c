/* A fake Cambricon CNDrv driver (libcndrv.so) for tests: contexts bound to a
 * device, memory with a capacity, kernels on the shared virtual timeline. */
#define _GNU_SOURCE
#include "fake_runtime.h"
#include "hami_cndrv_api.h"

#define EXPORT __attribute__((visibility("default")))

struct CNcontext_st { int device; };

static struct CNcontext_st g_ctx[HAMI_FAKE_GPU_MAX_DEVICES];
static __thread struct CNcontext_st *t_ctx;

static void number_contexts(void) {
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_DEVICES; i++) g_ctx[i].device = i;
}

/* Device ordinal -> fake-state device: MLU_VISIBLE_DEVICES (or the pin HAMI_FAKE_CAMBRICON_VISIBLE_DEVICES),
 * see hami_fake_visible.h. */
static const hami_fake_runtime_spec *hami_fake_runtime_of_library(void) {
    static const hami_fake_runtime_spec spec = {.vendor = "CAMBRICON",
                                                .visible_var = "MLU_VISIBLE_DEVICES",
                                                .first_address = 0x400000000000ull,
                                                .attached = number_contexts};
    return &spec;
}

static int ready(void) { return hami_fake_rt_ready(); }

EXPORT void hamiFakeCndrvSetKernelNs(uint64_t ns) { hami_fake_rt_set_kernel_ns(ns); }

EXPORT CNresult cnInit(int flags) { return ready() ? CN_SUCCESS : CN_ERROR_NOT_INITIALIZED; }

EXPORT CNresult cnDeviceGetCount(int *count) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    *count = hami_fake_rt.count;
    return CN_SUCCESS;
}

EXPORT CNresult cnDeviceGet(CNdev *device, int ordinal) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    *device = ordinal;
    return CN_SUCCESS;
}

EXPORT CNresult cnCtxCreate(CNcontext *pctx, unsigned int flags, CNdev dev) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= hami_fake_rt.count) return CN_CONTEXT_ERROR_INVALID;
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
    return hami_fake_rt_alloc(t_ctx->device, bytes, pmluAddr) == 0 ? CN_SUCCESS : CN_MEMORY_ERROR_OUT_OF_MEMORY;
}

EXPORT CNresult cnFree(CNaddr addr) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    return hami_fake_rt_free(addr) == 0 ? CN_SUCCESS : CN_CONTEXT_ERROR_INVALID;
}

EXPORT CNresult cnMemGetInfo(cn_uint64_t *pfreeBytes, cn_uint64_t *ptotalBytes) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    hami_fake_rt_mem_info(t_ctx->device, pfreeBytes, ptotalBytes);
    return CN_SUCCESS;
}

EXPORT CNresult cnInvokeKernel(CNkernel hkernel, unsigned int dimx, unsigned int dimy, unsigned int dimz,
                               KernelClass c, unsigned int reserve, CNqueue hqueue, void **kernelParams,
                               void **extra) {
    if (!ready()) return CN_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CN_CONTEXT_ERROR_INVALID;
    hami_fake_rt_run_kernel(t_ctx->device);
    return CN_SUCCESS;
}
