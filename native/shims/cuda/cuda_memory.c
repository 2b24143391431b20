/* Allocation, free and memory-info wrappers: reserve in the region first, then
 * call the driver, and give the reservation back if the driver fails.  (VMM,
 * pools, arrays and graphs have their own files; they reserve through here.) */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "cuda_shim.h"

#define REAL_OR_FAIL(name) HAMI_REAL_OR_FAIL(name)

CUresult hami_cuda_reserve(int dev, uint64_t bytes, const void *held) {
    int rc = hami_shim_reserve(dev, bytes);
    if (HAMI_UNLIKELY(rc == HAMI_E_OOM)) {
        /* Memory this process's pools and graph allocator keep idle is real
         * device memory, charged as such; at the limit it is worth more as
         * headroom than as a cache.  (The driver itself trims when it runs out.) */
        uint64_t freed = hami_cuda_pools_trim(dev, held) + hami_cuda_graphs_trim(dev);
        if (freed) rc = hami_shim_reserve(dev, bytes);
    }
    if (rc == HAMI_OK) return CUDA_SUCCESS;
    /* Over the limit or a broken region: the runtime's own OOM code, which
     * frameworks already handle (PyTorch raises OutOfMemoryError). */
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult reserve(int dev, uint64_t bytes) { return hami_cuda_reserve(dev, bytes, NULL); }

static CUresult finish_alloc(CUresult rc, int dev, uint64_t bytes, CUdeviceptr *dptr) {
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, bytes);
        return rc;
    }
    hami_ptrmap_put(&hami_cuda_ptrs, *dptr, bytes, dev);
    return rc;
}

HAMI_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAlloc_v2);
    if (!hami_shim_accounting()) return hami_real.cuMemAlloc_v2(dptr, bytesize);
    int dev = hami_cuda_current_device();
    CUresult rc = reserve(dev, bytesize);
    if (rc != CUDA_SUCCESS) return rc;
    return finish_alloc(hami_real.cuMemAlloc_v2(dptr, bytesize), dev, bytesize, dptr);
}

HAMI_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAllocManaged);
    if (!hami_shim_accounting()) return hami_real.cuMemAllocManaged(dptr, bytesize, flags);
    /* Managed memory can live on the device, so it counts against the current device. */
    int dev = hami_cuda_current_device();
    CUresult rc = reserve(dev, bytesize);
    if (rc != CUDA_SUCCESS) return rc;
    return finish_alloc(hami_real.cuMemAllocManaged(dptr, bytesize, flags), dev, bytesize, dptr);
}

HAMI_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAllocPitch_v2);
    if (!hami_shim_accounting())
        return hami_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    /* The pitch is known only afterwards: reserve a 512-byte-aligned estimate,
     * then settle the difference (and undo the allocation if it does not fit). */
    int dev = hami_cuda_current_device();
    uint64_t estimate = (uint64_t)((WidthInBytes + 511) & ~(size_t)511) * Height;
    CUresult rc = reserve(dev, estimate);
    if (rc != CUDA_SUCCESS) return rc;
    rc = hami_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, estimate);
        return rc;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (actual > estimate) {
        if (reserve(dev, actual - estimate) != CUDA_SUCCESS) {
            hami_real.cuMemFree_v2(*dptr);
            hami_shim_release(dev, estimate);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (actual < estimate) {
        hami_shim_release(dev, estimate - actual);
    }
    hami_ptrmap_put(&hami_cuda_ptrs, *dptr, actual, dev);
    return CUDA_SUCCESS;
}

/* cuMemFreeAsync of a cuMemAlloc allocation frees it when the stream gets there:
 * its bytes stay reserved until the next synchronisation says so. */
static pthread_mutex_t g_deferred_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_deferred[HAMI_REGION_MAX_DEVICES];
static int g_any_deferred;

static void defer_release(int dev, uint64_t size) {
    if (dev < 0 || dev >= HAMI_REGION_MAX_DEVICES) return;
    pthread_mutex_lock(&g_deferred_mu);
    g_deferred[dev] += size;
    __atomic_store_n(&g_any_deferred, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_deferred_mu);
}

void hami_cuda_release_deferred(void) {
    if (!__atomic_load_n(&g_any_deferred, __ATOMIC_ACQUIRE)) return;
    uint64_t take[HAMI_REGION_MAX_DEVICES];
    pthread_mutex_lock(&g_deferred_mu);
    memcpy(take, g_deferred, sizeof take);
    memset(g_deferred, 0, sizeof g_deferred);
    __atomic_store_n(&g_any_deferred, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_deferred_mu);
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++)
        if (take[d]) hami_shim_release(d, take[d]);
}

void hami_cuda_memory_after_fork(void) {
    pthread_mutex_init(&g_deferred_mu, NULL);
    memset(g_deferred, 0, sizeof g_deferred);
    g_any_deferred = 0;
}

/* Frees take the entry out of the map *before* calling the driver: once the
 * driver has freed, another thread may get the same address back, and its
 * entry must not be confused with ours. */
static CUresult free_ptr(uint64_t key, CUresult (*call)(uint64_t, void *), void *ctx, int async) {
    if (!hami_shim_accounting()) return call(key, ctx);
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&hami_cuda_ptrs, key, &size, &dev) == 0) {
        CUresult rc = call(key, ctx);
        if (rc != CUDA_SUCCESS)
            hami_ptrmap_put(&hami_cuda_ptrs, key, size, dev);
        else if (async)
            defer_release(dev, size);
        else
            hami_shim_release(dev, size);
        return rc;
    }
    /* A stream-ordered allocation: its pool keeps the memory, and the charge follows the pool. */
    CUresult rc;
    if (hami_cuda_pool_free(key, call, ctx, async, &rc)) return rc;
    return call(key, ctx);
}

static CUresult call_free(uint64_t p, void *ctx) { return hami_real.cuMemFree_v2((CUdeviceptr)p); }
static CUresult call_free_async(uint64_t p, void *s) { return hami_real.cuMemFreeAsync((CUdeviceptr)p, s); }
static CUresult call_free_async_ptsz(uint64_t p, void *s) {
    return hami_real.cuMemFreeAsync_ptsz((CUdeviceptr)p, s);
}

HAMI_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFree_v2);
    return free_ptr(dptr, call_free, NULL, 0);
}

/* A stream-ordered free gives nothing back at the call: the memory returns to
 * its pool when the stream reaches the free, and to the device when the pool
 * releases it -- both seen as the pool's reserved memory shrinking. */
HAMI_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFreeAsync);
    return free_ptr(dptr, call_free_async, hStream, 1);
}

HAMI_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFreeAsync_ptsz);
    return free_ptr(dptr, call_free_async_ptsz, hStream, 1);
}

HAMI_EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemGetInfo_v2);
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
    if (hami_shim_accounting()) hami_cuda_pools_settle(0); /* free memory as of now, not as of the last sync */
    CUresult rc = hami_real.cuMemGetInfo_v2(free_, total);
    if (rc == CUDA_SUCCESS && free_ && total) {
        uint64_t f = *free_, t = *total;
        if (hami_shim_clamp_meminfo(hami_cuda_current_device(), &f, &t)) {
            *free_ = (size_t)f;
            *total = (size_t)t;
        }
    }
    return rc;
}

HAMI_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuDeviceTotalMem_v2);
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = hami_real.cuDeviceTotalMem_v2(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes) {
        uint64_t f = *bytes, t = *bytes;
        if (hami_shim_clamp_meminfo(dev, &f, &t)) *bytes = (size_t)t;
    }
    return rc;
}
