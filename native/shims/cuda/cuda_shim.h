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
    X(cuGetProcAddress_v2) HAMI_CUDA_WRAPPED_VMM(X) HAMI_CUDA_WRAPPED_POOL(X) HAMI_CUDA_WRAPPED_ARRAY(X)    \
    HAMI_CUDA_WRAPPED_GRAPH(X) HAMI_CUDA_WRAPPED_SYNC(X) HAMI_CUDA_WRAPPED_V1(X) X(cuCtxSetLimit)

/* cuda_vmm.c: physical memory lives until its last mapping and its handle are gone */
#define HAMI_CUDA_WRAPPED_VMM(X)                                                                            \
    X(cuMemMap) X(cuMemUnmap) X(cuMemRetainAllocationHandle) X(cuMemExportToShareableHandle)                 \
    X(cuMemImportFromShareableHandle)
/* cuda_pool.c: stream-ordered allocations are charged as the pool's reserved memory */
#define HAMI_CUDA_WRAPPED_POOL(X)                                                                           \
    X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemPoolCreate) X(cuMemPoolDestroy)         \
    X(cuMemPoolTrimTo)
/* cuda_array.c */
#define HAMI_CUDA_WRAPPED_ARRAY(X)                                                                          \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuMipmappedArrayCreate) X(cuArrayDestroy)                    \
    X(cuMipmappedArrayDestroy)
/* cuda_graph.c: graph memory nodes are charged when a graph is instantiated */
#define HAMI_CUDA_WRAPPED_GRAPH(X)                                                                          \
    X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams) X(cuGraphInstantiateWithParams_ptsz)      \
    X(cuGraphInstantiate_v2) X(cuGraphExecDestroy) X(cuDeviceGraphMemTrim)
/* cuda_memory.c, cuda_array.c: the v1 entry points of the 32-bit ABI (before CUDA 3.2) */
#define HAMI_CUDA_WRAPPED_V1(X)                                                                             \
    X(cuMemAlloc) X(cuMemAllocPitch) X(cuMemFree) X(cuMemGetInfo) X(cuDeviceTotalMem) X(cuArrayCreate)       \
    X(cuArray3DCreate)
/* cuda_sync.c: where stream-ordered frees are known to be done and pools give memory back */
#define HAMI_CUDA_WRAPPED_SYNC(X)                                                                           \
    X(cuCtxSynchronize) X(cuCtxSynchronize_v2) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz)             \
    X(cuEventSynchronize) X(cuStreamQuery) X(cuStreamQuery_ptsz) X(cuEventQuery)

/* Driver functions the shim calls but does not replace.  X(name) */
#define HAMI_CUDA_USED(X)                                                                                   \
    X(cuCtxGetDevice) X(cuCtxGetDevice_v2) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuDeviceGet)      \
    X(cuDeviceGetCount) X(cuDeviceGetUuid_v2) X(cuDeviceGetPCIBusId) X(cuStreamGetDevice) X(cuStreamGetCtx)  \
    X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) X(cuMemPoolGetAttribute)                            \
    X(cuMemGetAllocationGranularity) X(cuArrayGetMemoryRequirements)                                        \
    X(cuMipmappedArrayGetMemoryRequirements) X(cuGraphGetNodes) X(cuGraphNodeGetType)                        \
    X(cuGraphMemAllocNodeGetParams) X(cuDeviceGetGraphMemAttribute) X(cuCtxGetLimit) X(cuDeviceGetAttribute) X(cuMemAdvise_v2) \
    X(cuEventCreate) X(cuEventRecord) X(cuEventElapsedTime) X(cuEventDestroy_v2) X(cuStreamIsCapturing)

#define HAMI_DECLARE_REAL(name) __typeof__(&name) name;
typedef struct hami_cuda_real {
    HAMI_CUDA_WRAPPED(HAMI_DECLARE_REAL)
    HAMI_CUDA_USED(HAMI_DECLARE_REAL)
} hami_cuda_real;

extern hami_cuda_real hami_real;
extern void *hami_cuda_driver; /* the libcuda.so.1 handle the real entry points came from */
extern int hami_cuda_ready;
extern hami_ptrmap hami_cuda_ptrs;

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

#define HAMI_REAL_OR_FAIL(name) \
    if (HAMI_UNLIKELY(!hami_real.name)) return CUDA_ERROR_NOT_INITIALIZED

/* cuda_memory.c: reserves in the region; when the limit refuses, first gives
 * back what this process's pools and graph allocator cache idly (`held`: a
 * pool whose lock the caller holds), then tries once more. */
CUresult hami_cuda_reserve(int dev, uint64_t bytes, const void *held);
/* A pointer map entry's device, marked when the allocation was served from host memory. */
#define HAMI_PTR_SPILLED (1 << 30)
/* After a synchronisation: what cuMemFreeAsync freed of cuMemAlloc allocations is given back. */
void hami_cuda_release_deferred(void);
void hami_cuda_memory_after_fork(void);

/* cuda_stream.c: the device a stream belongs to (special handles: the current one). */
int hami_cuda_stream_device(CUstream s);

/* cuda_pool.c */
/* A free of a stream-ordered allocation: 1 when ptr was one (the call was made), 0 otherwise. */
int hami_cuda_pool_free(uint64_t ptr, CUresult (*call)(uint64_t, void *), void *ctx, int async, CUresult *rc);
/* The pools' charges follow their reserved memory (after a synchronisation, or before a memory query). */
void hami_cuda_pools_settle(int synchronised);
/* Trims this process's pools on dev (their idle memory); returns the bytes given back. */
uint64_t hami_cuda_pools_trim(int dev, const void *held);

/* cuda_graph.c */
void hami_cuda_graphs_settle(void);
uint64_t hami_cuda_graphs_trim(int dev);

/* cuda_vmm.c, cuda_array.c: after fork the child's maps start empty */
void hami_cuda_vmm_after_fork(void);
void hami_cuda_array_after_fork(void);
void hami_cuda_pool_after_fork(void);
void hami_cuda_graph_after_fork(void);
void hami_cuda_limits_after_fork(void);

/* cuda_pace.c: launches timed on the device for the compute pacer.  begin gates the launch (and may
 * record a probe's first event), end records the probe's second event and charges the launch. */
typedef struct hami_cuda_pace_ticket {
    int skip;            /* a stream being captured: nothing runs now, nothing is charged */
    int device;
    int shape;
    int probe;
    uint64_t probe_at_ns;
    CUstream stream;
} hami_cuda_pace_ticket;
uint64_t hami_cuda_shape_key(const void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shm);
void hami_cuda_pace_begin(hami_cuda_pace_ticket *t, uint64_t key, CUstream stream);
void hami_cuda_pace_end(hami_cuda_pace_ticket *t, CUresult rc);
void hami_cuda_pace_after_fork(void);

/* cuda_init.c: "GPU-..." UUID and PCI bus id of a CUDA ordinal; non-zero when CUDA cannot say yet. */
int hami_cuda_identity(int device, char *uuid, size_t uuid_len, char *bus_id, size_t bus_len);

/* cuda_nvml.c: the NVML functions the shim replaces (through dlsym), or NULL. */
void *hami_nvml_wrapper_for(const char *name);

#endif
