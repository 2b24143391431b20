/* The v1 entry points of the 32-bit ABI (before CUDA 3.2), which a real driver
 * still exports: 32-bit device pointers and sizes.  They share the _v2 ones'
 * allocations -- a cuMemAlloc block may be freed by cuMemFree_v2 and the reverse. */
#define _GNU_SOURCE
#include <limits.h>

#include "fake_cuda.h"

EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc = fake_alloc_low(&p, bytesize);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr_v1)p;
    return rc;
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes, unsigned int Height,
                                unsigned int ElementSizeBytes) {
    if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
    unsigned int pitch = (WidthInBytes + 511u) & ~511u;
    CUdeviceptr p;
    CUresult rc = fake_alloc_low(&p, (size_t)pitch * Height);
    if (rc == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = pitch;
    }
    return rc;
}

EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) { return cuMemFree_v2((CUdeviceptr)dptr); }

static unsigned int clamp32(size_t v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    size_t f, t;
    CUresult rc = cuMemGetInfo_v2(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free_ = clamp32(f);
        *total = clamp32(t);
    }
    return rc;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t t;
    CUresult rc = cuDeviceTotalMem_v2(&t, dev);
    if (rc == CUDA_SUCCESS) *bytes = clamp32(t);
    return rc;
}

EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) {
    if (!desc) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY_DESCRIPTOR d = {desc->Width, desc->Height, desc->Format, desc->NumChannels};
    return cuArrayCreate_v2(pHandle, &d);
}

EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) {
    if (!desc) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d = {desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, desc->Flags};
    return cuArray3DCreate_v2(pHandle, &d);
}
