/* Allocation, free and memory-info wrappers: reserve in the region first, then
 * call the driver, and give the reservation back if the driver fails. */
#define _GNU_SOURCE
#include "cuda_shim.h"

#define REAL_OR_FAIL(name) \
    if (HAMI_UNLIKELY(!hami_real.name)) return CUDA_ERROR_NOT_INITIALIZED

static CUresult reserve(int dev, uint64_t bytes) {
    int rc = hami_shim_reserve(dev, bytes);
    if (rc == HAMI_OK) return CUDA_SUCCESS;
    /* Over the limit or a broken region: the runtime's own OOM code, which
     * frameworks already handle (PyTorch raises OutOfMemoryError). */
    return CUDA_ERROR_OUT_OF_MEMORY;
}

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

static CUresult alloc_async(__typeof__(&cuMemAllocAsync) real, CUdeviceptr *dptr, size_t bytesize,
                            CUstream hStream) {
    if (HAMI_UNLIKELY(!real)) return CUDA_ERROR_NOT_INITIALIZED;
    if (!hami_shim_accounting()) return real(dptr, bytesize, hStream);
    int dev = hami_cuda_current_device();
    CUresult rc = reserve(dev, bytesize);
    if (rc != CUDA_SUCCESS) return rc;
    return finish_alloc(real(dptr, bytesize, hStream), dev, bytesize, dptr);
}

HAMI_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    hami_cuda_ensure();
    return alloc_async(hami_real.cuMemAllocAsync, dptr, bytesize, hStream);
}

HAMI_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    hami_cuda_ensure();
    return alloc_async(hami_real.cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}

HAMI_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemCreate);
    if (!hami_shim_accounting() || !handle) return hami_real.cuMemCreate(handle, size, prop, flags);
    int dev = (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) ? prop->location.id
                                                                           : hami_cuda_current_device();
    CUresult rc = reserve(dev, size);
    if (rc != CUDA_SUCCESS) return rc;
    rc = hami_real.cuMemCreate(handle, size, prop, flags);
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, size);
        return rc;
    }
    hami_ptrmap_put(&hami_cuda_handles, *handle, size, dev);
    return rc;
}

/* Frees take the entry out of the map *before* calling the driver: once the
 * driver has freed, another thread may get the same address back, and its
 * entry must not be confused with ours. */
static CUresult free_via(hami_ptrmap *map, uint64_t key, CUresult (*call)(uint64_t, void *), void *ctx) {
    uint64_t size;
    int32_t dev;
    int known = hami_shim_accounting() && hami_ptrmap_take(map, key, &size, &dev) == 0;
    CUresult rc = call(key, ctx);
    if (known) {
        if (rc == CUDA_SUCCESS)
            hami_shim_release(dev, size);
        else
            hami_ptrmap_put(map, key, size, dev);
    }
    return rc;
}

static CUresult call_free(uint64_t p, void *ctx) { return hami_real.cuMemFree_v2((CUdeviceptr)p); }
static CUresult call_release(uint64_t h, void *ctx) { return hami_real.cuMemRelease(h); }
static CUresult call_free_async(uint64_t p, void *s) { return hami_real.cuMemFreeAsync((CUdeviceptr)p, s); }
static CUresult call_free_async_ptsz(uint64_t p, void *s) {
    return hami_real.cuMemFreeAsync_ptsz((CUdeviceptr)p, s);
}

HAMI_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFree_v2);
    return free_via(&hami_cuda_ptrs, dptr, call_free, NULL);
}

/* Stream-ordered frees release the reservation when the call is made rather
 * than when the stream reaches it: a window of at most one in-flight free. */
HAMI_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFreeAsync);
    return free_via(&hami_cuda_ptrs, dptr, call_free_async, hStream);
}

HAMI_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemFreeAsync_ptsz);
    return free_via(&hami_cuda_ptrs, dptr, call_free_async_ptsz, hStream);
}

HAMI_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemRelease);
    return free_via(&hami_cuda_handles, handle, call_release, NULL);
}

HAMI_EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    hami_cuda_ensure();
    REAL_OR_FAIL(cuMemGetInfo_v2);
    if (hami_g_shim.mode == HAMI_SHIM_BROKEN) return CUDA_ERROR_NOT_INITIALIZED;
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
