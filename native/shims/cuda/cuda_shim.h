/* Internal to the CUDA shim: the real driver entry points and helpers. */
#ifndef HAMI_CUDA_SHIM_H
#define HAMI_CUDA_SHIM_H

#include "hami_cuda_api.h"
#include "ptrmap.h"
#include "shim_core.h"

#define HAMI_EXPORT __attribute__((visibility("default")))
#define HAMI_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Every driver function the shim replaces.  X(name) */
#define HAMI_CUDA_WRAPPED(X)                                                                                \
    X(cuInit) X(cuMemAlloc_v2) X(cuMemAllocManaged) X(cuMemAllocPitch_v2) X(cuMemAllocAsync)                 \
    X(cuMemAllocAsync_ptsz) X(cuMemCreate) X(cuMemFree_v2) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)          \
    X(cuMemRelease) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuLaunchKernel) X(cuLaunchKernel_ptsz)       \
    X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)                               \
    X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuGetProcAddress)             \
    X(cuGetProcAddress_v2)

#define HAMI_DECLARE_REAL(name) __typeof__(&name) name;
typedef struct hami_cuda_real {
    HAMI_CUDA_WRAPPED(HAMI_DECLARE_REAL)
    __typeof__(&cuCtxGetDevice) cuCtxGetDevice;
    /* device identity, for matching CUDA devices to NVML ones */
    __typeof__(&cuDeviceGet) cuDeviceGet;
    __typeof__(&cuDeviceGetUuid_v2) cuDeviceGetUuid_v2;
    __typeof__(&cuDeviceGetPCIBusId) cuDeviceGetPCIBusId;
} hami_cuda_real;

extern hami_cuda_real hami_real;
extern int hami_cuda_ready;
extern hami_ptrmap hami_cuda_ptrs, hami_cuda_handles;

void hami_cuda_init(void);
void *hami_real_dlsym(void *handle, const char *name);
/* The shim's replacement for an exported driver name, or NULL. */
void *hami_cuda_wrapper_for(const char *name);
/* The wrapper standing in for a real entry point, or NULL. */
void *hami_cuda_wrapper_for_real(void *real);

static inline void hami_cuda_ensure(void) {
    if (HAMI_UNLIKELY(!__atomic_load_n(&hami_cuda_ready, __ATOMIC_ACQUIRE))) hami_cuda_init();
}

static inline int hami_cuda_current_device(void) {
    CUdevice d;
    if (hami_real.cuCtxGetDevice && hami_real.cuCtxGetDevice(&d) == CUDA_SUCCESS) return d;
    return 0;
}

#endif
