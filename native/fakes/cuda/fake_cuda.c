/* A fake CUDA driver (libcuda.so.1) for tests: devices, contexts, streams and
 * events, memory with a capacity, and kernels that take device time the way a
 * real GPU's do (hami_fake_timeline.h: launch cost, in-order streams, contexts
 * time-sliced, events that carry the device's completion time).  State that
 * several processes must agree on lives in the shared file of hami_fake_gpu.h.
 * VMM, pools, arrays and graphs: see fake_cuda.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_runtime.h"

struct CUmod_st { int unused; };

pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

static struct CUctx_st g_ctx[HAMI_FAKE_GPU_MAX_DEVICES];
static uint64_t g_next_addr = 0x700000000000ull;
static __thread struct CUctx_st *t_ctx;
static __thread struct CUctx_st *t_ctx_stack[8]; /* cuCtxPushCurrent / cuCtxPopCurrent */
static __thread int t_ctx_depth;
static struct CUstream_st g_default_stream[HAMI_FAKE_GPU_MAX_DEVICES];
static struct CUmod_st g_module;
static struct CUfunc_st g_functions[128]; /* one per kernel name, for the process's lifetime */
static int g_nfunctions;

static void reset_contexts(void);

static void after_fork_child(void) {
    reset_contexts(); /* a child inherits no context: its first retain creates (and pays for) its own */
    pthread_mutex_init(&fake_mu, NULL);
}

static void number_devices(void) {
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_DEVICES; i++) g_ctx[i].device = g_default_stream[i].device = i;
}

/* CUDA ordinal -> fake-state device, from CUDA_VISIBLE_DEVICES as the CUDA runtime reads it (indices,
 * GPU and MIG UUIDs) or the test's pin HAMI_FAKE_CUDA_VISIBLE_DEVICES: see hami_fake_visible.h.
 * Device addresses: g_next_addr, shared with VMM reservations and pools (fake_new_va). */
static const hami_fake_runtime_spec *hami_fake_runtime_of_library(void) {
    static const hami_fake_runtime_spec spec = {.vendor = "CUDA",
                                                .visible_var = "CUDA_VISIBLE_DEVICES",
                                                .uuid_of = hami_fake_gpu_uuid,
                                                .attached = number_devices,
                                                .after_fork = after_fork_child};
    return &spec;
}

static int ready(void) { return hami_fake_rt_ready(); }
static hami_fake_device *state_of(int dev) { return hami_fake_rt_device(dev); }
static hami_fake_proc *proc_of(int dev) { return hami_fake_rt_proc(dev); }

int fake_ready(void) { return ready(); }
uint64_t fake_state_stamp(void) { return ready() ? hami_fake_rt.state->created_ns : 0; }

static int valid_dev(int dev) { return ready() && dev >= 0 && dev < hami_fake_rt.count; }

static CUresult current_dev(int *dev) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = t_ctx->device;
    return CUDA_SUCCESS;
}

int fake_valid_dev(int dev) { return valid_dev(dev); }
CUresult fake_current_dev(int *dev) { return current_dev(dev); }
hami_fake_device *fake_state_of(int dev) { return state_of(dev); }
hami_fake_proc *fake_proc_of(int dev) { return proc_of(dev); }

CUstream fake_stream(CUstream s) {
    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) return s;
    int dev = 0;
    if (current_dev(&dev) != CUDA_SUCCESS) return NULL;
    return &g_default_stream[dev];
}

uint64_t fake_new_va(uint64_t bytes) {
    /* Never reused within a process, so a stale free cannot hit a new block. */
    return __atomic_fetch_add(&g_next_addr, (bytes + FAKE_GRANULARITY - 1) & ~(FAKE_GRANULARITY - 1),
                              __ATOMIC_RELAXED);
}

/* Fake-only API: the duration of this thread's next kernels (UINT64_MAX = default). */
EXPORT void hamiFakeCudaSetKernelNs(uint64_t ns) { hami_fake_rt_set_kernel_ns(ns); }

/* Process teardown: a driver frees everything a process held. */
__attribute__((destructor)) static void give_back_all(void) {
    if (!hami_fake_rt.state) return;
    for (int d = 0; d < hami_fake_rt.count; d++) {
        hami_fake_proc *p = hami_fake_rt.procs[d];
        if (p) hami_fake_mem_give_all(state_of(d), p);
    }
}

/* As the real driver: device queries answer only after cuInit (nvidia-smi never calls it). */
static int g_inited;

EXPORT CUresult cuInit(unsigned int Flags) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (hami_fake_rt.count == 0) return CUDA_ERROR_NO_DEVICE; /* as the driver with no device visible */
    __atomic_store_n(&g_inited, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

#define NEED_INIT() \
    if (!__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE)) return CUDA_ERROR_NOT_INITIALIZED
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }

EXPORT CUresult cuDeviceGetCount(int *count) {
    NEED_INIT();
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    *count = hami_fake_rt.count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_INIT();
    if (!valid_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_INIT();
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "HAMi Fake GPU %d", dev);
    return CUDA_SUCCESS;
}

static void identity(int index, char uuid[96], char bus_id[32]) { hami_fake_gpu_identity(index, uuid, 96, bus_id, 32); }

EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    NEED_INIT();
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    char uuid[96], bus[32];
    unsigned int d = 0, b = 0, v = 0, fn = 0;
    identity(hami_fake_rt.order[dev], uuid, bus);
    sscanf(bus, "%x:%x:%x.%x", &d, &b, &v, &fn);
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%x", d, b, v, fn); /* CUDA's form: 0000:18:00.0 */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *out, CUdevice dev) {
    NEED_INIT();
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    char uuid[96], bus[32];
    identity(hami_fake_rt.order[dev], uuid, bus);
    const char *p = strncasecmp(uuid, "GPU-", 4) == 0 ? uuid + 4 : uuid;
    memset(out->bytes, 0, sizeof out->bytes);
    for (int n = 0; *p && n < 32; p++) {
        int x = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
              : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
        if (x < 0) continue; /* dashes */
        out->bytes[n / 2] = (char)((unsigned char)out->bytes[n / 2] | (n % 2 ? x : x << 4));
        n++;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *out, CUdevice dev) { return cuDeviceGetUuid_v2(out, dev); }

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED_INIT();
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = state_of(dev)->total_bytes;
    return CUDA_SUCCESS;
}

/* What a context holds on its device, outside every allocation of the process: its local memory,
 * code, heaps and the runtime's own buffers.  Measured on an H200, driver 580.159.04, CUDA 13.0,
 * PyTorch 2.11: 3,518 MiB in NVML for a 3,000 MiB tensor, so 518 MiB per process.
 * $HAMI_FAKE_CONTEXT_MIB sets another figure (0: contexts take nothing).  The limiter does not see
 * it (no allocation call is made for it), as with the real driver. */
#define FAKE_CONTEXT_MIB 518ull

static uint64_t context_bytes(void) {
    const char *v = getenv("HAMI_FAKE_CONTEXT_MIB");
    return ((v && *v) ? strtoull(v, NULL, 10) : FAKE_CONTEXT_MIB) << 20;
}

/* The process's primary contexts: retains per device and what each context took (under g_ctx_mu). */
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ctx_refs[HAMI_FAKE_GPU_MAX_DEVICES];
static uint64_t g_ctx_bytes[HAMI_FAKE_GPU_MAX_DEVICES];

static void reset_contexts(void) {
    pthread_mutex_init(&g_ctx_mu, NULL);
    memset(g_ctx_refs, 0, sizeof g_ctx_refs);
    memset(g_ctx_bytes, 0, sizeof g_ctx_bytes);
}

/* The first retain creates the context, which takes its memory from the device for this process:
 * NVML counts it in the process's used memory; a device too full for it refuses the context. */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_INIT();
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    if (g_ctx_refs[dev] == 0) {
        uint64_t bytes = context_bytes();
        hami_fake_proc *p = bytes ? proc_of(dev) : NULL;
        if (bytes && (!p || hami_fake_mem_take(state_of(dev), p, bytes) != 0)) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else g_ctx_bytes[dev] = bytes;
    }
    if (rc == CUDA_SUCCESS) g_ctx_refs[dev]++;
    pthread_mutex_unlock(&g_ctx_mu);
    if (rc == CUDA_SUCCESS) *pctx = &g_ctx[dev];
    return rc;
}

/* The last release destroys the context: its memory goes back to the device. */
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_ctx_mu);
    if (g_ctx_refs[dev] > 0 && --g_ctx_refs[dev] == 0 && g_ctx_bytes[dev]) {
        hami_fake_proc *p = proc_of(dev);
        if (p) hami_fake_mem_give(state_of(dev), p, g_ctx_bytes[dev]);
        g_ctx_bytes[dev] = 0;
    }
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { t_ctx = ctx; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { *pctx = t_ctx; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return current_dev(device); }

EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    if (!ctx) return current_dev(device);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (t_ctx_depth == (int)(sizeof t_ctx_stack / sizeof t_ctx_stack[0])) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = t_ctx;
    t_ctx = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (t_ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = t_ctx;
    t_ctx = t_ctx_stack[--t_ctx_depth];
    return CUDA_SUCCESS;
}

/* Every stream of the device has reached everything queued: their frees are done. */
static void device_reached(int dev) {
    pthread_mutex_lock(&fake_mu);
    fake_stream_reached(&g_default_stream[dev], UINT64_MAX);
    pthread_mutex_unlock(&fake_mu);
}

static struct CUstream_st *g_streams[256]; /* created streams, for a device-wide synchronize */

static CUresult synchronize_device(int dev) {
    hami_fake_synchronize(state_of(dev), proc_of(dev));
    device_reached(dev);
    pthread_mutex_lock(&fake_mu);
    for (size_t i = 0; i < sizeof g_streams / sizeof g_streams[0]; i++)
        if (g_streams[i] && g_streams[i]->device == dev) fake_stream_reached(g_streams[i], UINT64_MAX);
    pthread_mutex_unlock(&fake_mu);
    fake_pools_release_to_threshold();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
    int dev;
    CUresult rc = current_dev(&dev);
    return rc != CUDA_SUCCESS ? rc : synchronize_device(dev);
}

/* CUDA 13: the context to synchronise (NULL: the current one). */
EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    if (!ctx) return cuCtxSynchronize();
    if (!valid_dev(ctx->device)) return CUDA_ERROR_INVALID_CONTEXT;
    return synchronize_device(ctx->device);
}

/* ---- memory ---- */

CUresult fake_take(int dev, uint64_t bytes) {
    fake_share_reap(); /* exported memory whose holders are all gone is free again */
    return hami_fake_rt_take(dev, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void fake_give(int dev, uint64_t bytes) { hami_fake_rt_give(dev, bytes); }
void fake_disown(int dev, uint64_t bytes) { hami_fake_mem_disown(state_of(dev), proc_of(dev), bytes); }
void fake_give_unowned(int dev, uint64_t bytes) { hami_fake_mem_give(state_of(dev), NULL, bytes); }

/* The 32-bit ABI's allocations come from below 4 GiB, where its pointers reach. */
static uint64_t g_next_low_addr = 0x10000000ull;

static CUresult alloc_from(int dev, CUdeviceptr *dptr, size_t bytes, uint64_t *next) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (next == &g_next_low_addr && __atomic_load_n(next, __ATOMIC_RELAXED) + bytes > 0xffffffffull)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fake_take(dev, bytes);
    if (rc != CUDA_SUCCESS) return rc;
    /* Addresses are never reused within a process, so a stale free cannot hit a new block. */
    uint64_t addr = __atomic_fetch_add(next, (bytes + 511) & ~511ull, __ATOMIC_RELAXED);
    hami_ptrmap_put(&hami_fake_rt.ptrs, addr, bytes, dev);
    *dptr = addr;
    return CUDA_SUCCESS;
}

static CUresult alloc_on(int dev, CUdeviceptr *dptr, size_t bytes) { return alloc_from(dev, dptr, bytes, &g_next_addr); }

static CUresult alloc_current(CUdeviceptr *dptr, size_t bytes) {
    int dev;
    CUresult rc = current_dev(&dev);
    return rc != CUDA_SUCCESS ? rc : alloc_on(dev, dptr, bytes);
}

CUresult fake_alloc_low(CUdeviceptr *dptr, size_t bytes) {
    int dev;
    CUresult rc = current_dev(&dev);
    return rc != CUDA_SUCCESS ? rc : alloc_from(dev, dptr, bytes, &g_next_low_addr);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return alloc_current(dptr, bytesize); }

/* Managed memory lives in host memory until the device touches it, and the fake
 * never touches: its bytes count on the host (host_bytes), not against the
 * device's capacity -- the host side of virtual device memory.
 * $HAMI_FAKE_HOST_MEMORY_MIB caps them (default: no cap). */
#define HOST_BACKED (1 << 30) /* a pointer map entry's device, marked: host memory */

static CUresult alloc_host(int dev, CUdeviceptr *dptr, size_t bytes) {
    if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    hami_fake_device *d = state_of(dev);
    const char *cap = getenv("HAMI_FAKE_HOST_MEMORY_MIB");
    uint64_t limit = cap && *cap ? strtoull(cap, NULL, 10) << 20 : UINT64_MAX;
    uint64_t now = __atomic_add_fetch(&d->host_bytes, bytes, __ATOMIC_ACQ_REL);
    if (now > limit) {
        __atomic_fetch_sub(&d->host_bytes, bytes, __ATOMIC_ACQ_REL);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t peak = __atomic_load_n(&d->host_peak_bytes, __ATOMIC_ACQUIRE);
    while (now > peak && !__atomic_compare_exchange_n(&d->host_peak_bytes, &peak, now, 1, __ATOMIC_ACQ_REL,
                                                      __ATOMIC_ACQUIRE)) {
    }
    uint64_t addr = __atomic_fetch_add(&g_next_addr, (bytes + 511) & ~511ull, __ATOMIC_RELAXED);
    hami_ptrmap_put(&hami_fake_rt.ptrs, addr, bytes, dev | HOST_BACKED);
    *dptr = addr;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    int dev;
    CUresult rc = current_dev(&dev);
    return rc != CUDA_SUCCESS ? rc : alloc_host(dev, dptr, bytesize);
}

/* Advice changes where managed pages would live, not how much memory they take here. */
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&hami_fake_rt.ptrs, devPtr, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    hami_ptrmap_put(&hami_fake_rt.ptrs, devPtr, size, dev);
    return dev & HOST_BACKED && count <= size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
    CUmemLocation where = {device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, device};
    return cuMemAdvise_v2(devPtr, count, advice, where);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes) {
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    CUresult rc = alloc_current(dptr, pitch * Height);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
}

/* cuMemFree takes any kind of allocation; stream-ordered ones go back to their pool at once
 * (the caller promises their stream work is done). */
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&hami_fake_rt.ptrs, dptr, &size, &dev) == 0) {
        if (dev & HOST_BACKED) __atomic_fetch_sub(&state_of(dev & ~HOST_BACKED)->host_bytes, size, __ATOMIC_ACQ_REL);
        else fake_give(dev, size);
        return CUDA_SUCCESS;
    }
    if (fake_pool_owns(dptr)) return fake_pool_free_now(dptr);
    if (fake_graph_owns(dptr)) return fake_graph_free(dptr);
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (fake_pool_owns(dptr)) return fake_pool_free_async(dptr, hStream);
    if (fake_graph_owns(dptr)) return fake_graph_free(dptr);
    /* A cuMemAlloc allocation: freed when the stream gets there. */
    CUstream s = fake_stream(hStream);
    uint64_t size;
    int32_t dev;
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    if (hami_ptrmap_take(&hami_fake_rt.ptrs, dptr, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev & HOST_BACKED) { /* host memory: nothing of the device's waits for the stream */
        __atomic_fetch_sub(&state_of(dev & ~HOST_BACKED)->host_bytes, size, __ATOMIC_ACQ_REL);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fake_mu);
    CUresult rc = fake_defer_free(s, -1, dev, size);
    pthread_mutex_unlock(&fake_mu);
    if (rc != CUDA_SUCCESS) hami_ptrmap_put(&hami_fake_rt.ptrs, dptr, size, dev);
    return rc;
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFreeAsync(dptr, hStream); }

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    int dev;
    CUresult rc = current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    hami_fake_rt_mem_info(dev, free_, total);
    return CUDA_SUCCESS;
}

/* ---- modules, streams, launches ---- */

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { *module = &g_module; return CUDA_SUCCESS; }

/* The kernel registry: a name ending in "_<N>us" or "_<N>ns" runs N microseconds (nanoseconds). */
static uint64_t duration_named(const char *name) {
    const char *u = strrchr(name, '_');
    if (!u) return UINT64_MAX;
    char *end;
    unsigned long long n = strtoull(u + 1, &end, 10);
    if (end == u + 1) return UINT64_MAX;
    if (strcmp(end, "us") == 0) return (uint64_t)n * 1000ull;
    if (strcmp(end, "ns") == 0) return (uint64_t)n;
    return UINT64_MAX;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    struct CUfunc_st *f = NULL;
    for (int i = 0; i < g_nfunctions && !f; i++)
        if (strncmp(g_functions[i].name, name, sizeof g_functions[i].name - 1) == 0) f = &g_functions[i];
    if (!f && g_nfunctions < (int)(sizeof g_functions / sizeof g_functions[0])) {
        f = &g_functions[g_nfunctions++];
        snprintf(f->name, sizeof f->name, "%s", name);
        f->duration_ns = duration_named(name);
    }
    pthread_mutex_unlock(&fake_mu);
    if (!f) return CUDA_ERROR_NOT_FOUND;
    *hfunc = f;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    int dev;
    CUresult rc = current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->device = dev;
    pthread_mutex_lock(&fake_mu);
    for (size_t i = 0; i < sizeof g_streams / sizeof g_streams[0]; i++) {
        if (!g_streams[i]) {
            g_streams[i] = s;
            break;
        }
    }
    pthread_mutex_unlock(&fake_mu);
    *phStream = s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
    /* Work already queued still completes: its frees reach the pool. */
    pthread_mutex_lock(&fake_mu);
    fake_stream_reached(hStream, UINT64_MAX);
    for (size_t i = 0; i < sizeof g_streams / sizeof g_streams[0]; i++)
        if (g_streams[i] == hStream) g_streams[i] = NULL;
    pthread_mutex_unlock(&fake_mu);
    free(hStream);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    CUstream s = fake_stream(hStream);
    if (!s || !pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = &g_ctx[s->device];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device) {
    CUstream s = fake_stream(hStream);
    if (!s || !device) return CUDA_ERROR_INVALID_VALUE;
    *device = s->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    CUstream s = fake_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    hami_fake_synchronize(state_of(s->device), proc_of(s->device));
    pthread_mutex_lock(&fake_mu);
    fake_stream_reached(s, UINT64_MAX);
    pthread_mutex_unlock(&fake_mu);
    fake_pools_release_to_threshold();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return cuStreamSynchronize(hStream); }

/* A query answers as a real one: CUDA_ERROR_NOT_READY while the device still runs
 * this process's queued kernels, else CUDA_SUCCESS -- and the stream has then reached its frees. */
static int device_busy(int dev) { return hami_fake_busy(state_of(dev), proc_of(dev)); }

EXPORT CUresult cuStreamQuery(CUstream hStream) {
    CUstream s = fake_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    if (device_busy(s->device)) return CUDA_ERROR_NOT_READY;
    pthread_mutex_lock(&fake_mu);
    fake_stream_reached(s, UINT64_MAX);
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) { return cuStreamQuery(hStream); }

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    *phEvent = e;
    return CUDA_SUCCESS;
}

/* An event completes when the recording process's context has run everything queued before it. */
EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    CUstream s = fake_stream(hStream);
    if (!hEvent || !s) return CUDA_ERROR_INVALID_VALUE;
    hami_fake_proc *p = proc_of(s->device);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_mu);
    hEvent->stream = s;
    hEvent->seq = s->seq;
    hEvent->device = s->device;
    hEvent->mark = hami_fake_lane_mark(state_of(s->device), (int)(p - state_of(s->device)->procs));
    hEvent->recorded = 1;
    hEvent->recorded_ns = hami_fake_now_ns();
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

static int event_slot(CUevent e) { return (int)(proc_of(e->device) - state_of(e->device)->procs); }

EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    if (hEvent->stream) {
        hami_fake_lane_wait(state_of(hEvent->device), event_slot(hEvent), hEvent->mark);
        pthread_mutex_lock(&fake_mu);
        fake_stream_reached(hEvent->stream, hEvent->seq); /* only what was queued before the record */
        pthread_mutex_unlock(&fake_mu);
    }
    fake_pools_release_to_threshold();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent hEvent) {
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    if (hEvent->stream) {
        if (!hami_fake_lane_reached(state_of(hEvent->device), event_slot(hEvent), hEvent->mark))
            return CUDA_ERROR_NOT_READY;
        pthread_mutex_lock(&fake_mu);
        fake_stream_reached(hEvent->stream, hEvent->seq);
        pthread_mutex_unlock(&fake_mu);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    free(hEvent);
    return CUDA_SUCCESS;
}

/* Milliseconds between two completed events, from the device's own completion times. */
EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    if (!pMilliseconds || !hStart || !hEnd) return CUDA_ERROR_INVALID_VALUE;
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (!hStart->recorded || !hEnd->recorded) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t0 = hami_fake_lane_time_of(state_of(hStart->device), event_slot(hStart), hStart->mark);
    uint64_t t1 = hami_fake_lane_time_of(state_of(hEnd->device), event_slot(hEnd), hEnd->mark);
    if (!t0 || !t1) return CUDA_ERROR_NOT_READY;
    /* An event on an idle stream completes when the device reaches it, not when earlier work ended. */
    if (t0 < hStart->recorded_ns) t0 = hStart->recorded_ns;
    if (t1 < hEnd->recorded_ns) t1 = hEnd->recorded_ns;
    *pMilliseconds = (float)((double)((int64_t)(t1 - t0)) / 1e6);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    return cuEventElapsedTime(pMilliseconds, hStart, hEnd);
}

/* Fake-only: plays every device of a state file up to now, so that a reader of the file sees current
 * counters (the timeline is otherwise played only by those who launch, wait or sample). */
EXPORT int hamiFakePlayState(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    void *m = mmap(NULL, sizeof(hami_fake_gpu_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    hami_fake_gpu_state *s = m;
    int rc = -1;
    if (s->magic == HAMI_FAKE_GPU_MAGIC && s->version == HAMI_FAKE_GPU_VERSION && !hami_fake_mapped) {
        hami_fake_mapped = s; /* only in a process that does not run the fake itself */
        for (uint32_t i = 0; i < s->device_count && i < HAMI_FAKE_GPU_MAX_DEVICES; i++) hami_fake_play(&s->devices[i]);
        hami_fake_mapped = NULL;
        rc = 0;
    }
    munmap(m, sizeof(hami_fake_gpu_state));
    return rc;
}

/* The fake never captures a stream into a graph: every stream runs what it is given. */
EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_stream(hStream)) return CUDA_ERROR_INVALID_CONTEXT;
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

static CUresult run(CUstream stream, CUfunction f) {
    int dev;
    if (stream) {
        if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
        CUstream s = fake_stream(stream);
        if (!s) return CUDA_ERROR_INVALID_CONTEXT;
        dev = s->device;
    } else {
        CUresult rc = current_dev(&dev);
        if (rc != CUDA_SUCCESS) return rc;
    }
    uint64_t ns = f && f->duration_ns != UINT64_MAX ? f->duration_ns : hami_fake_rt_kernel_ns();
    hami_fake_run_kernel(state_of(dev), proc_of(dev), ns);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                               void **extra) {
    return run(s, f);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm, CUstream s,
                                    void **params, void **extra) {
    return run(s, f);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    return config ? run(config->hStream, f) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(config, f, params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                          CUstream s, void **params) {
    return run(s, f);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                               CUstream s, void **params) {
    return run(s, f);
}

/* A fake graph launch: its memory nodes (fake_cuda_graph.c), then one kernel of the thread's current duration. */
EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    CUresult rc = fake_graph_run(hGraphExec, hStream);
    return rc != CUDA_SUCCESS ? rc : run(hStream, NULL);
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return cuGraphLaunch(hGraphExec, hStream);
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
    switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; break;
    default: *pStr = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}
