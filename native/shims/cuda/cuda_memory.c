/* Allocation, free and memory-info wrappers: reserve in the region first, then
 * call the driver, and give the reservation back if the driver fails.  (VMM,
 * pools, arrays and graphs have their own files; they reserve through here.) */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "cuda_shim.h"

#define REAL_OR_FAIL(name) HAMI_REAL_OR_FAIL(name)

CUresult hami_cuda_reserve(int dev, uint64_t bytes, const void *held) {
    int rc = hami_shim_try_reserve(dev, bytes);
    if (HAMI_UNLIKELY(rc == HAMI_E_OOM)) {
        /* Memory this process's pools and graph allocator keep idle is real
         * device memory, charged as such; at the limit it is worth more as
         * headroom than as a cache.  (The driver itself trims when it runs out.) */
        uint64_t freed = hami_cuda_pools_trim(dev, held) + hami_cuda_graphs_trim(dev);
        if (freed) rc = hami_shim_try_reserve(dev, bytes);
        if (rc == HAMI_E_OOM) hami_shim_count_refusal(dev); /* once per refused call, whatever was retried */
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

/* Virtual device memory: an allocation within the share that the card cannot
 * hold physically is served from managed memory the driver keeps on the host
 * (preferred location: host), counted in the region as spilled.  The share's
 * limit still bounds the whole, device and host parts together. */
typedef CUresult (*advise_v1_fn)(CUdeviceptr, size_t, CUmem_advise, CUdevice);

static CUresult prefer_host(CUdeviceptr p, size_t bytes) {
    if (hami_real.cuMemAdvise_v2) {
        CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
        return hami_real.cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
    }
    /* drivers before CUDA 12.2: the device form, the CPU as a device */
    advise_v1_fn v1 = hami_cuda_driver ? (advise_v1_fn)hami_real_dlsym(hami_cuda_driver, "cuMemAdvise") : NULL;
    return v1 ? v1(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU) : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult spill(int dev, CUdeviceptr *dptr, size_t bytes) {
    if (!hami_real.cuMemAllocManaged || hami_shim_spill(dev, bytes) != HAMI_OK) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = hami_real.cuMemAllocManaged(dptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (rc == CUDA_SUCCESS && prefer_host(*dptr, bytes) != CUDA_SUCCESS) {
        hami_real.cuMemFree_v2(*dptr);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        hami_shim_unspill(dev, bytes);
        return rc;
    }
    hami_ptrmap_put(&hami_cuda_ptrs, *dptr, bytes, dev | HAMI_PTR_SPILLED);
    return CUDA_SUCCESS;
}

HAMI_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAlloc_v2);
    if (!hami_shim_accounting()) return hami_real.cuMemAlloc_v2(dptr, bytesize);
    int dev = hami_cuda_current_device();
    CUresult rc = reserve(dev, bytesize);
    if (rc != CUDA_SUCCESS) return rc;
    rc = hami_real.cuMemAlloc_v2(dptr, bytesize);
    if (HAMI_UNLIKELY(rc == CUDA_ERROR_OUT_OF_MEMORY) && dptr && hami_shim_virtual(dev)) {
        rc = spill(dev, dptr, bytesize);
        if (rc == CUDA_SUCCESS) return rc;
    }
    return finish_alloc(rc, dev, bytesize, dptr);
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

/* The pitch is known only afterwards: reserve a 512-byte-aligned estimate,
 * then settle the difference (and undo the allocation if it does not fit).
 * `call` allocates and returns the address and pitch (either ABI). */
typedef CUresult (*pitch_call)(void *args, uint64_t *addr, uint64_t *pitch);

static CUresult alloc_pitch(uint64_t width, uint64_t height, pitch_call call, void *args, uint64_t *addr) {
    int dev = hami_cuda_current_device();
    uint64_t estimate = ((width + 511) & ~(uint64_t)511) * height, pitch = 0;
    CUresult rc = reserve(dev, estimate);
    if (rc != CUDA_SUCCESS) return rc;
    rc = call(args, addr, &pitch);
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, estimate);
        return rc;
    }
    uint64_t actual = pitch * height;
    if (actual > estimate) {
        if (reserve(dev, actual - estimate) != CUDA_SUCCESS) {
            hami_real.cuMemFree_v2((CUdeviceptr)*addr);
            hami_shim_release(dev, estimate);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (actual < estimate) {
        hami_shim_release(dev, estimate - actual);
    }
    hami_ptrmap_put(&hami_cuda_ptrs, *addr, actual, dev);
    return CUDA_SUCCESS;
}

struct pitch_v2 { size_t width, height; unsigned int elem; size_t *pitch; };

static CUresult call_pitch_v2(void *args, uint64_t *addr, uint64_t *pitch) {
    struct pitch_v2 *a = args;
    CUdeviceptr p;
    CUresult rc = hami_real.cuMemAllocPitch_v2(&p, a->pitch, a->width, a->height, a->elem);
    if (rc == CUDA_SUCCESS) *addr = p, *pitch = *a->pitch;
    return rc;
}

HAMI_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAllocPitch_v2);
    if (!hami_shim_accounting() || !dptr || !pPitch)
        return hami_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    struct pitch_v2 a = {WidthInBytes, Height, ElementSizeBytes, pPitch};
    uint64_t addr;
    CUresult rc = alloc_pitch(WidthInBytes, Height, call_pitch_v2, &a, &addr);
    if (rc == CUDA_SUCCESS) *dptr = addr;
    return rc;
}

/* ---- the v1 entry points of the 32-bit ABI: dlsym(h, "cuMemAlloc") and
 * cuGetProcAddress(..., version < 3020) hand them out.  Same accounting, same
 * map of addresses: a block may be freed through either ABI. ---- */

HAMI_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAlloc);
    if (!hami_shim_accounting() || !dptr) return hami_real.cuMemAlloc(dptr, bytesize);
    int dev = hami_cuda_current_device();
    CUresult rc = reserve(dev, bytesize);
    if (rc != CUDA_SUCCESS) return rc;
    rc = hami_real.cuMemAlloc(dptr, bytesize);
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, bytesize);
        return rc;
    }
    hami_ptrmap_put(&hami_cuda_ptrs, *dptr, bytesize, dev);
    return rc;
}

struct pitch_v1 { unsigned int width, height, elem, *pitch; };

static CUresult call_pitch_v1(void *args, uint64_t *addr, uint64_t *pitch) {
    struct pitch_v1 *a = args;
    CUdeviceptr_v1 p;
    CUresult rc = hami_real.cuMemAllocPitch(&p, a->pitch, a->width, a->height, a->elem);
    if (rc == CUDA_SUCCESS) *addr = p, *pitch = *a->pitch;
    return rc;
}

HAMI_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                     unsigned int Height, unsigned int ElementSizeBytes) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemAllocPitch);
    if (!hami_shim_accounting() || !dptr || !pPitch)
        return hami_real.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    struct pitch_v1 a = {WidthInBytes, Height, ElementSizeBytes, pPitch};
    uint64_t addr;
    CUresult rc = alloc_pitch(WidthInBytes, Height, call_pitch_v1, &a, &addr);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr_v1)addr;
    return rc;
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
    int32_t entry;
    if (hami_ptrmap_take(&hami_cuda_ptrs, key, &size, &entry) == 0) {
        CUresult rc = call(key, ctx);
        int dev = entry & ~HAMI_PTR_SPILLED;
        if (rc != CUDA_SUCCESS) {
            hami_ptrmap_put(&hami_cuda_ptrs, key, size, entry);
            return rc;
        }
        if (entry & HAMI_PTR_SPILLED) hami_shim_unspill(dev, size); /* host bytes: back at once */
        if (async)
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

static CUresult call_free_v1(uint64_t p, void *ctx) { return hami_real.cuMemFree((CUdeviceptr_v1)p); }

HAMI_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFree);
    return free_ptr(dptr, call_free_v1, NULL, 0);
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

static unsigned int clamp32(uint64_t v) { return v > 0xffffffffull ? 0xffffffffu : (unsigned int)v; }

HAMI_EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemGetInfo);
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = hami_real.cuMemGetInfo(free_, total);
    if (rc == CUDA_SUCCESS && free_ && total) {
        uint64_t f = *free_, t = *total;
        if (hami_shim_clamp_meminfo(hami_cuda_current_device(), &f, &t)) *free_ = clamp32(f), *total = clamp32(t);
    }
    return rc;
}

HAMI_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuDeviceTotalMem);
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = hami_real.cuDeviceTotalMem(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes) {
        uint64_t f = *bytes, t = *bytes;
        if (hami_shim_clamp_meminfo(dev, &f, &t)) *bytes = clamp32(t);
    }
    return rc;
}
