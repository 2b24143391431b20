/* CNDrv wrappers: cnMalloc, cnFree, cnMemGetInfo, cnInvokeKernel.  Calls made
 * from inside a CNRT wrapper pass straight through (already accounted). */
#define _GNU_SOURCE
#include <pthread.h>

#include "cambricon_shim.h"
#include "hami_cndrv_api.h"
#include "vendor_lib.h"

static struct {
    __typeof__(&cnMalloc) cnMalloc;
    __typeof__(&cnFree) cnFree;
    __typeof__(&cnMemGetInfo) cnMemGetInfo;
    __typeof__(&cnInvokeKernel) cnInvokeKernel;
    __typeof__(&cnCtxGetDevice) cnCtxGetDevice;
} real;
static int g_resolved;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    void *h = hami_open_vendor_lib("CAMBRICON", "libcndrv.so");
    if (h) {
        real.cnMalloc = (__typeof__(real.cnMalloc))dlsym(h, "cnMalloc");
        real.cnFree = (__typeof__(real.cnFree))dlsym(h, "cnFree");
        real.cnMemGetInfo = (__typeof__(real.cnMemGetInfo))dlsym(h, "cnMemGetInfo");
        real.cnInvokeKernel = (__typeof__(real.cnInvokeKernel))dlsym(h, "cnInvokeKernel");
        real.cnCtxGetDevice = (__typeof__(real.cnCtxGetDevice))dlsym(h, "cnCtxGetDevice");
    }
    __atomic_store_n(&g_resolved, 1, __ATOMIC_RELEASE);
}

static inline void ensure(void) {
    if (UNLIKELY(!__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE))) pthread_once(&g_once, resolve);
    hami_cambricon_ensure();
}

static int current_device(void) {
    CNdev d;
    return real.cnCtxGetDevice && real.cnCtxGetDevice(&d) == CN_SUCCESS ? d : 0;
}

HAMI_EXPORT CNresult cnMalloc(CNaddr *pmluAddr, cn_uint64_t bytes) {
    ensure();
    if (UNLIKELY(!real.cnMalloc)) return CN_ERROR_NOT_INITIALIZED;
    if (!hami_shim_accounting() || hami_in_cnrt) return real.cnMalloc(pmluAddr, bytes);
    int dev = current_device();
    if (hami_shim_reserve(dev, bytes) != HAMI_OK) return CN_MEMORY_ERROR_OUT_OF_MEMORY;
    CNresult rc = real.cnMalloc(pmluAddr, bytes);
    if (rc != CN_SUCCESS) {
        hami_shim_release(dev, bytes);
        return rc;
    }
    hami_ptrmap_put(&hami_cn_ptrs, *pmluAddr, bytes, dev);
    return rc;
}

HAMI_EXPORT CNresult cnFree(CNaddr addr) {
    ensure();
    if (UNLIKELY(!real.cnFree)) return CN_ERROR_NOT_INITIALIZED;
    if (hami_in_cnrt) return real.cnFree(addr);
    uint64_t size;
    int32_t dev;
    int known = hami_shim_accounting() && hami_ptrmap_take(&hami_cn_ptrs, addr, &size, &dev) == 0;
    CNresult rc = real.cnFree(addr);
    if (known) {
        if (rc == CN_SUCCESS)
            hami_shim_release(dev, size);
        else
            hami_ptrmap_put(&hami_cn_ptrs, addr, size, dev);
    }
    return rc;
}

HAMI_EXPORT CNresult cnMemGetInfo(cn_uint64_t *pfreeBytes, cn_uint64_t *ptotalBytes) {
    ensure();
    if (UNLIKELY(!real.cnMemGetInfo) || hami_g_shim.mode == HAMI_SHIM_BROKEN) return CN_ERROR_NOT_INITIALIZED;
    CNresult rc = real.cnMemGetInfo(pfreeBytes, ptotalBytes);
    if (rc == CN_SUCCESS && !hami_in_cnrt && pfreeBytes && ptotalBytes)
        hami_shim_clamp_meminfo(current_device(), pfreeBytes, ptotalBytes);
    return rc;
}

HAMI_EXPORT CNresult cnInvokeKernel(CNkernel hkernel, unsigned int dimx, unsigned int dimy, unsigned int dimz,
                                    KernelClass c, unsigned int reserve, CNqueue hqueue, void **kernelParams,
                                    void **extra) {
    ensure();
    if (UNLIKELY(hami_shim_compute_limited()) && !hami_in_cnrt) hami_shim_throttle(current_device());
    if (UNLIKELY(!real.cnInvokeKernel)) return CN_ERROR_NOT_INITIALIZED;
    return real.cnInvokeKernel(hkernel, dimx, dimy, dimz, c, reserve, hqueue, kernelParams, extra);
}
