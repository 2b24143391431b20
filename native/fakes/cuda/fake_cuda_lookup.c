/* cuGetProcAddress of the fake driver.  It resolves from a static table, not
 * dlsym, so a test can tell that the *shim's* cuGetProcAddress wrapper (and
 * not its dlsym wrapper) swapped in the interposed functions. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "hami_cuda_api.h"

#define EXPORT __attribute__((visibility("default")))
#define ENTRY(name) {#name, (void *)name}

void hamiFakeCudaSetKernelNs(uint64_t ns);
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device); /* fake_cuda.c */

static const struct { const char *name; void *fn; } TABLE[] = {
    ENTRY(cuInit), ENTRY(cuDriverGetVersion), ENTRY(cuDeviceGetCount), ENTRY(cuDeviceGet),
    ENTRY(cuDeviceGetName), ENTRY(cuDeviceTotalMem_v2), ENTRY(cuDevicePrimaryCtxRetain),
    ENTRY(cuDevicePrimaryCtxRelease_v2), ENTRY(cuCtxSetCurrent), ENTRY(cuCtxGetCurrent), ENTRY(cuCtxGetDevice),
    ENTRY(cuCtxSynchronize), ENTRY(cuMemAlloc_v2), ENTRY(cuMemAllocManaged), ENTRY(cuMemAllocPitch_v2),
    ENTRY(cuMemAllocAsync), ENTRY(cuMemAllocAsync_ptsz), ENTRY(cuMemFree_v2), ENTRY(cuMemFreeAsync),
    ENTRY(cuMemFreeAsync_ptsz), ENTRY(cuMemCreate), ENTRY(cuMemRelease), ENTRY(cuMemGetInfo_v2),
    ENTRY(cuModuleLoadData), ENTRY(cuModuleGetFunction), ENTRY(cuStreamCreate), ENTRY(cuStreamSynchronize),
    ENTRY(cuLaunchKernel), ENTRY(cuLaunchKernel_ptsz), ENTRY(cuLaunchKernelEx), ENTRY(cuLaunchKernelEx_ptsz),
    ENTRY(cuLaunchCooperativeKernel), ENTRY(cuLaunchCooperativeKernel_ptsz), ENTRY(cuGraphCreate),
    ENTRY(cuGraphInstantiateWithFlags), ENTRY(cuGraphDestroy), ENTRY(cuGraphExecDestroy), ENTRY(cuGraphLaunch),
    ENTRY(cuGraphLaunch_ptsz), ENTRY(cuGetErrorName), ENTRY(cuGetProcAddress), ENTRY(cuGetProcAddress_v2),
    ENTRY(cuDeviceGetPCIBusId), ENTRY(cuDeviceGetUuid), ENTRY(cuDeviceGetUuid_v2),
    /* contexts, streams, events */
    ENTRY(cuCtxGetDevice_v2), ENTRY(cuCtxPushCurrent_v2), ENTRY(cuCtxPopCurrent_v2), ENTRY(cuStreamDestroy_v2),
    ENTRY(cuStreamQuery), ENTRY(cuStreamQuery_ptsz), ENTRY(cuEventQuery), ENTRY(cuCtxSynchronize_v2), ENTRY(cuStreamGetCtx), ENTRY(cuStreamGetDevice), ENTRY(cuStreamSynchronize_ptsz),
    ENTRY(cuEventCreate), ENTRY(cuEventRecord), ENTRY(cuEventSynchronize), ENTRY(cuEventDestroy_v2),
    /* VMM */
    ENTRY(cuMemGetAllocationGranularity), ENTRY(cuMemAddressReserve), ENTRY(cuMemAddressFree), ENTRY(cuMemMap),
    ENTRY(cuMemUnmap), ENTRY(cuMemRetainAllocationHandle), ENTRY(cuMemSetAccess),
    ENTRY(cuMemExportToShareableHandle), ENTRY(cuMemImportFromShareableHandle),
    /* pools */
    ENTRY(cuMemAllocFromPoolAsync), ENTRY(cuMemAllocFromPoolAsync_ptsz), ENTRY(cuMemPoolCreate),
    ENTRY(cuMemPoolDestroy), ENTRY(cuMemPoolTrimTo), ENTRY(cuMemPoolGetAttribute), ENTRY(cuMemPoolSetAttribute),
    ENTRY(cuDeviceGetDefaultMemPool), ENTRY(cuDeviceGetMemPool), ENTRY(cuDeviceSetMemPool),
    ENTRY(cuMemAdvise), ENTRY(cuMemAdvise_v2),
    /* context limits */
    ENTRY(cuCtxSetLimit), ENTRY(cuCtxGetLimit), ENTRY(cuDeviceGetAttribute),
    /* the 32-bit ABI */
    ENTRY(cuMemAlloc), ENTRY(cuMemAllocPitch), ENTRY(cuMemFree), ENTRY(cuMemGetInfo), ENTRY(cuDeviceTotalMem),
    ENTRY(cuArrayCreate), ENTRY(cuArray3DCreate),
    /* arrays */
    ENTRY(cuArrayCreate_v2), ENTRY(cuArray3DCreate_v2), ENTRY(cuMipmappedArrayCreate), ENTRY(cuArrayDestroy),
    ENTRY(cuMipmappedArrayDestroy), ENTRY(cuArrayGetMemoryRequirements), ENTRY(cuMipmappedArrayGetMemoryRequirements),
    /* graph memory */
    ENTRY(cuGraphAddMemAllocNode), ENTRY(cuGraphAddMemFreeNode), ENTRY(cuGraphGetNodes), ENTRY(cuGraphNodeGetType),
    ENTRY(cuGraphMemAllocNodeGetParams), ENTRY(cuGraphInstantiateWithParams), ENTRY(cuGraphInstantiateWithParams_ptsz),
    ENTRY(cuDeviceGraphMemTrim), ENTRY(cuDeviceGetGraphMemAttribute),
};

static void *find(const char *name) {
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (strcmp(TABLE[i].name, name) == 0) return TABLE[i].fn;
    return NULL;
}

static const struct { const char *base, *newer; int since; } VERSIONED[] = {
    {"cuCtxSynchronize", "cuCtxSynchronize_v2", 13000},
    /* the 64-bit ABI of CUDA 3.2; before it, the v1 entry points */
    {"cuMemAlloc", "cuMemAlloc_v2", 3020}, {"cuMemAllocPitch", "cuMemAllocPitch_v2", 3020},
    {"cuMemFree", "cuMemFree_v2", 3020}, {"cuMemGetInfo", "cuMemGetInfo_v2", 3020},
    {"cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020}, {"cuArrayCreate", "cuArrayCreate_v2", 3020},
    {"cuArray3DCreate", "cuArray3DCreate_v2", 3020},
};

static void *resolve(const char *symbol, int version, cuuint64_t flags) {
    char name[256];
    void *fn = NULL;
    /* As the real driver: a base name maps to the newest variant the caller's
     * version allows; per-thread-stream callers get the _ptsz entry points. */
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(name, sizeof name, "%s_ptsz", symbol);
        fn = find(name);
    }
    if (!fn && strcmp(symbol, "cuGetProcAddress") == 0 && version >= 12000) fn = find("cuGetProcAddress_v2");
    if (!fn && strcmp(symbol, "cuGraphInstantiate") == 0 && version >= 12000) fn = find("cuGraphInstantiateWithFlags");
    /* Versioned names: the caller's version picks the ABI (CUDA 13 changed cuCtxSynchronize's). */
    for (size_t i = 0; !fn && i < sizeof VERSIONED / sizeof VERSIONED[0]; i++)
        if (strcmp(symbol, VERSIONED[i].base) == 0)
            fn = find(version >= VERSIONED[i].since ? VERSIONED[i].newer : VERSIONED[i].base);
    /* cuCtxGetDevice_v2 is another function (it takes a context), not a newer ABI of the same one. */
    if (!fn && strcmp(symbol, "cuGetProcAddress") != 0 && strcmp(symbol, "cuCtxGetDevice") != 0) {
        snprintf(name, sizeof name, "%s_v2", symbol);
        fn = find(name);
    }
    if (!fn) fn = find(symbol);
    return fn;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = resolve(symbol, cudaVersion, flags);
    if (symbolStatus) *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
