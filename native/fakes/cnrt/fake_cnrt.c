/* A fake Cambricon CNRT runtime (libcnrt.so) for tests, on the shared fake
 * device state of hami_fake_gpu.h.  Standalone: it does not call libcndrv. */
#define _GNU_SOURCE
#include "fake_runtime.h"
#include "hami_cnrt_api.h"

#define EXPORT __attribute__((visibility("default")))

/* Device ordinal -> fake-state device: MLU_VISIBLE_DEVICES (or the pin HAMI_FAKE_CAMBRICON_VISIBLE_DEVICES),
 * see hami_fake_visible.h. */
static const hami_fake_runtime_spec *hami_fake_runtime_of_library(void) {
    static const hami_fake_runtime_spec spec = {
        .vendor = "CAMBRICON", .visible_var = "MLU_VISIBLE_DEVICES", .first_address = 0x500000000000ull};
    return &spec;
}

static __thread int t_dev; /* CNRT uses device 0 until cnrtSetDevice */

/* CNRT answers "no device" while none is visible, where the other runtimes fail later. */
static int ready(void) { return hami_fake_rt_ready() && hami_fake_rt.count > 0; }

EXPORT void hamiFakeCnrtSetKernelNs(uint64_t ns) { hami_fake_rt_set_kernel_ns(ns); }

EXPORT cnrtRet_t cnrtGetDeviceCount(unsigned int *count) {
    if (!ready()) return cnrtErrorNoDevice;
    *count = (unsigned int)hami_fake_rt.count;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtSetDevice(int device) {
    if (!ready()) return cnrtErrorNoDevice;
    if (device < 0 || device >= hami_fake_rt.count) return cnrtErrorArgsInvalid;
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
    uint64_t addr;
    if (hami_fake_rt_alloc(t_dev, bytes, &addr) != 0) return cnrtErrorNoMem;
    *pPtr = (void *)(uintptr_t)addr;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtFree(void *ptr) {
    if (!ready() || hami_fake_rt_free((uint64_t)(uintptr_t)ptr) != 0) return cnrtErrorArgsInvalid;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtMemGetInfo(size_t *free_, size_t *total) {
    if (!ready()) return cnrtErrorNoDevice;
    hami_fake_rt_mem_info(t_dev, free_, total);
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtInvokeKernel(const void *kernel, cnrtDim3_t dim, cnrtFunctionType_t ktype, void **args,
                                  size_t reserved, cnrtQueue_t queue) {
    if (!ready()) return cnrtErrorNoDevice;
    hami_fake_rt_run_kernel(t_dev);
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue) {
    *pQueue = (cnrtQueue_t)(uintptr_t)1;
    return cnrtSuccess;
}

EXPORT cnrtRet_t cnrtQueueSync(cnrtQueue_t queue) {
    if (ready()) hami_fake_rt_synchronize(t_dev);
    return cnrtSuccess;
}
