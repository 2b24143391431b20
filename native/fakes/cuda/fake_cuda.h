/* Internal to the fake libcuda: what its source files share.
 *
 * The fake models the memory semantics a limiter must get right, so that a
 * wrong shim fails the tests:
 *   - VMM (fake_cuda_vmm.c): a cuMemCreate handle's physical memory lives until
 *     its last mapping is unmapped *and* its last reference is released;
 *   - memory pools (fake_cuda_pool.c): a pool grows in chunks, keeps freed
 *     memory (release threshold), and a cuMemFreeAsync returns memory to the
 *     pool only when the stream reaches it (a synchronisation, here);
 *   - arrays (fake_cuda_array.c): opaque layouts larger than the texels;
 *   - graph memory nodes (fake_cuda_graph.c): physical memory taken at launch
 *     from a per-device graph pool that keeps it until trimmed.
 * Every byte any of them holds is taken from the shared fake-GPU state
 * (hami_fake_gpu.h), so the tests read what the "device" really held. */
#ifndef HAMI_FAKE_CUDA_H
#define HAMI_FAKE_CUDA_H

#include <pthread.h>
#include <stdint.h>

#include "hami_cuda_api.h"
#include "hami_fake_gpu.h"
#include "ptrmap.h"

#define EXPORT __attribute__((visibility("default")))
#define FAKE_GRANULARITY (2ull << 20) /* VMM and pool chunk granularity, as on current GPUs */

struct CUctx_st {
    int device;
};

/* A stream-ordered free waiting for its stream to reach it. */
typedef struct fake_pending {
    uint64_t size;
    int pool;   /* index of the pool it returns to; -1: a cuMemAlloc allocation, freed to the device */
    int device;
    uint64_t seq;
    struct fake_pending *next;
} fake_pending;

struct CUstream_st {
    int device;
    uint64_t seq;          /* operations enqueued so far (events record a position) */
    fake_pending *pending; /* guarded by fake_mu */
};

struct CUevent_st {
    CUstream stream;
    uint64_t seq;
    unsigned int flags;    /* CU_EVENT_*: timing unless CU_EVENT_DISABLE_TIMING */
    int recorded;
    int device;            /* where it was recorded */
    uint64_t mark;         /* the recording process's queued work then (hami_fake_timeline.h) */
    uint64_t recorded_ns;  /* when it was recorded: the device cannot reach it before */
};

/* A kernel: its device time, from its name ("hami_fake_kernel_<N>us" or "..._<N>ns"); UINT64_MAX =
 * the thread's choice (hamiFakeCudaSetKernelNs) or HAMI_FAKE_KERNEL_US. */
struct CUfunc_st {
    char name[64];
    uint64_t duration_ns;
};

/* One lock for the fake's pool, VMM, graph and array bookkeeping: tests need
 * faithful semantics, not speed (plain allocations keep their own sharded map). */
extern pthread_mutex_t fake_mu;

int fake_ready(void);
uint64_t fake_state_stamp(void); /* when the shared state file was created: tells one from its successor */
int fake_valid_dev(int dev);
CUresult fake_current_dev(int *dev);
hami_fake_device *fake_state_of(int dev);
hami_fake_proc *fake_proc_of(int dev);
/* Takes bytes of the device's capacity for this process (CUDA_ERROR_OUT_OF_MEMORY when full). */
CUresult fake_take(int dev, uint64_t bytes);
void fake_give(int dev, uint64_t bytes);
/* Exported memory: the exporter's bytes stay on the device but leave its count (disown), and go
 * back to the device when the last holder lets go (give_unowned).  Through fake_cuda.c: the
 * fake state's books are kept by the translation unit that mapped it. */
void fake_disown(int dev, uint64_t bytes);
void fake_give_unowned(int dev, uint64_t bytes);
/* The pre-12.2 advice (CUDA 13's cuda.h gives the name to the location form; the fake exports both). */
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
/* cuMemAlloc of the 32-bit ABI: an address below 4 GiB (fake_cuda_v1.c). */
CUresult fake_alloc_low(CUdeviceptr *dptr, size_t bytes);
/* Fresh device addresses, never reused within a process. */
uint64_t fake_new_va(uint64_t bytes);
/* The stream a handle names (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the current device's default). */
CUstream fake_stream(CUstream s);

/* fake_cuda_pool.c */
int fake_pool_owns(uint64_t ptr);
CUresult fake_pool_free_now(uint64_t ptr);         /* cuMemFree of a pool allocation */
CUresult fake_pool_free_async(uint64_t ptr, CUstream s);
/* Queues a free on the stream (the caller holds fake_mu). */
CUresult fake_defer_free(CUstream s, int pool, int device, uint64_t size);
/* The stream has reached every operation up to seq: its pending frees return to their pools. */
void fake_stream_reached(CUstream s, uint64_t seq);
/* A synchronisation: pools above their release threshold give idle memory back. */
void fake_pools_release_to_threshold(void);

/* fake_cuda_share.c: exported VMM allocations, held across processes */
int fake_share_export(int device, uint64_t size, uint64_t *id_out);
int fake_share_token_fd(int entry, uint64_t id);
int fake_share_import(int fd, uint64_t *size, int *device);
void fake_share_drop(int entry);
void fake_share_reap(void);

/* fake_cuda_graph.c */
int fake_graph_owns(uint64_t ptr);
CUresult fake_graph_free(uint64_t ptr);            /* cuMemFree/cuMemFreeAsync of a graph allocation */
CUresult fake_graph_run(CUgraphExec exec, CUstream s); /* takes and frees graph memory of a launch */

#endif
