/* CNRT wrappers: cnrtMalloc, cnrtFree, cnrtMemGetInfo, cnrtInvokeKernel. */
#define _GNU_SOURCE
#include <pthread.h>

#include "cambricon_shim.h"
#include "hami_cnrt_api.h"
#include "vendor_lib.h"

static struct {
    __typeof__(&cnrtMalloc) cnrtMalloc;
    __typeof__(&cnrtFree) cnrtFree;
    __typeof__(&cnrtMemGetInfo) cnrtMemGetInfo;
    __typeof__(&cnrtInvokeKernel) cnrtInvokeKernel;
    __typeof__(&cnrtGetDevice) cnrtGetDevice;
} real;
static int g_resolved;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    void *h = hami_open_vendor_lib("CAMBRICON", "libcnrt.so");
    if (h) {
        real.cnrtMalloc = (__typeof__(real.cnrtMalloc))dlsym(h, "cnrtMalloc");
        real.cnrtFree = (__typeof__(real.cnrtFree))dlsym(h, "cnrtFree");
        real.cnrtMemGetInfo = (__typeof__(real.cnrtMemGetInfo))dlsym(h, "cnrtMemGetInfo");
        real.cnrtInvokeKernel = (__typeof__(real.cnrtInvokeKernel))dlsym(h, "cnrtInvokeKernel");
        real.cnrtGetDevice = (__typeof__(real.cnrtGetDevice))dlsym(h, "cnrtGetDevice");
    }
    __atomic_store_n(&g_resolved, 1, __ATOMIC_RELEASE);
}

static inline void ensure(void) {
    if (UNLIKELY(!__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE))) pthread_once(&g_once, resolve);
    hami_cambricon_ensure();
}

static int current_device(void) {
    int d;
    return real.cnrtGetDevice && real.cnrtGetDevice(&d) == cnrtSuccess ? d : 0;
}

HAMI_EXPORT cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes) {
    ensure();
    if (UNLIKELY(!real.cnrtMalloc)) return cnrtErrorNoDevice;
    if (!hami_shim_accounting()) return real.cnrtMalloc(pPtr, bytes);
    int dev = current_device();
    if (hami_shim_reserve(dev, bytes) != HAMI_OK) return cnrtErrorNoMem;
    hami_in_cnrt++;
    cnrtRet_t rc = real.cnrtMalloc(pPtr, bytes);
    hami_in_cnrt--;
    if (rc != cnrtSuccess) {
        hami_shim_release(dev, bytes);
        return rc;
    }
    hami_ptrmap_put(&hami_cn_ptrs, (uint64_t)(uintptr_t)*pPtr, bytes, dev);
    return rc;
}

HAMI_EXPORT cnrtRet_t cnrtFree(void *ptr) {
    ensure();
    if (UNLIKELY(!real.cnrtFree)) return cnrtErrorNoDevice;
    uint64_t size;
    int32_t dev;
    int known = hami_shim_accounting() && hami_ptrmap_take(&hami_cn_ptrs, (uint64_t)(uintptr_t)ptr, &size, &dev) == 0;
    hami_in_cnrt++;
    cnrtRet_t rc = real.cnrtFree(ptr);
    hami_in_cnrt--;
    if (known) {
        if (rc == cnrtSuccess)
            hami_shim_release(dev, size);
        else
            hami_ptrmap_put(&hami_cn_ptrs, (uint64_t)(uintptr_t)ptr, size, dev);
    }
    return rc;
}

HAMI_EXPORT cnrtRet_t cnrtMemGetInfo(size_t *free_, size_t *total) {
    ensure();
    if (UNLIKELY(!real.cnrtMemGetInfo) || hami_g_shim.mode == HAMI_SHIM_BROKEN) return cnrtErrorNoDevice;
    hami_in_cnrt++;
    cnrtRet_t rc = real.cnrtMemGetInfo(free_, total);
    hami_in_cnrt--;
    if (rc == cnrtSuccess && free_ && total) {
        uint64_t f = *free_, t = *total;
        if (hami_shim_clamp_meminfo(current_device(), &f, &t)) {
            *free_ = (size_t)f;
            *total = (size_t)t;
        }
    }
    return rc;
}

HAMI_EXPORT cnrtRet_t cnrtInvokeKernel(const void *kernel, cnrtDim3_t dim, cnrtFunctionType_t ktype, void **args,
                                       size_t reserved, cnrtQueue_t queue) {
    ensure();
    if (UNLIKELY(hami_shim_compute_limited())) hami_shim_throttle(current_device());
    if (UNLIKELY(!real.cnrtInvokeKernel)) return cnrtErrorNoDevice;
    hami_in_cnrt++;
    cnrtRet_t rc = real.cnrtInvokeKernel(kernel, dim, ktype, args, reserved, queue);
    hami_in_cnrt--;
    return rc;
}
