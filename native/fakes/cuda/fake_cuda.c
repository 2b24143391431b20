/* A fake CUDA driver (libcuda.so.1) for tests: devices, contexts, memory with
 * a capacity, and kernels that occupy a virtual device timeline.  State that
 * several processes must agree on lives in the shared file of hami_fake_gpu.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hami_cuda_api.h"
#include "hami_fake_gpu.h"
#include "ptrmap.h"

#define EXPORT __attribute__((visibility("default")))

struct CUctx_st { int device; };
struct CUstream_st { int device; };
struct CUmod_st { int unused; };
struct CUfunc_st { int unused; };
struct CUgraph_st { int unused; };
struct CUgraphExec_st { int unused; };

static hami_fake_gpu_state *g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct CUctx_st g_ctx[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_fake_proc *g_proc[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_ptrmap g_ptrs, g_handles;
static uint64_t g_next_addr = 0x700000000000ull;
static uint64_t g_next_handle = 1;
static __thread struct CUctx_st *t_ctx;
static __thread uint64_t t_kernel_ns = UINT64_MAX;
static uint64_t g_default_kernel_ns;
static struct CUmod_st g_module;
static struct CUfunc_st g_function;

static void after_fork_child(void) {
    memset(g_proc, 0, sizeof g_proc);
    hami_ptrmap_after_fork(&g_ptrs);
    hami_ptrmap_after_fork(&g_handles);
}

/* CUDA ordinal -> fake-state device.  HAMI_FAKE_CUDA_VISIBLE_DEVICES="2,0" shows
 * state devices 2 and 0 as ordinals 0 and 1, as CUDA_VISIBLE_DEVICES reorders a
 * real host's GPUs; unset, ordinal i is state device i. */
static int g_order[HAMI_FAKE_GPU_MAX_DEVICES];
static int g_count;

static hami_fake_device *state_of(int dev) { return &g_state->devices[g_order[dev]]; }

static void choose_visible(void) {
    const char *v = getenv("HAMI_FAKE_CUDA_VISIBLE_DEVICES");
    g_count = 0;
    if (!v || !*v) {
        for (uint32_t i = 0; i < g_state->device_count; i++) g_order[g_count++] = (int)i;
        return;
    }
    for (const char *p = v; *p && g_count < HAMI_FAKE_GPU_MAX_DEVICES;) {
        char *end;
        long i = strtol(p, &end, 10);
        if (end == p) break;
        if (i >= 0 && (uint32_t)i < g_state->device_count) g_order[g_count++] = (int)i;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') break;
    }
}

static void attach(void) {
    g_state = hami_fake_gpu_attach("CUDA");
    if (g_state) choose_visible();
    g_default_kernel_ns = hami_fake_default_kernel_ns();
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_DEVICES; i++) g_ctx[i].device = i;
    pthread_atfork(NULL, NULL, after_fork_child);
}

static int ready(void) {
    pthread_once(&g_once, attach);
    return g_state != NULL;
}

static hami_fake_proc *proc_of(int dev) {
    hami_fake_proc *p = __atomic_load_n(&g_proc[dev], __ATOMIC_ACQUIRE);
    if (!p) {
        p = hami_fake_proc_slot(state_of(dev), (int32_t)getpid());
        __atomic_store_n(&g_proc[dev], p, __ATOMIC_RELEASE);
    }
    return p;
}

static int valid_dev(int dev) { return ready() && dev >= 0 && dev < g_count; }

static CUresult current_dev(int *dev) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = t_ctx->device;
    return CUDA_SUCCESS;
}

/* Fake-only API: the duration of this thread's next kernels (UINT64_MAX = default). */
EXPORT void hamiFakeCudaSetKernelNs(uint64_t ns) { t_kernel_ns = ns; }

/* Process teardown: a driver frees everything a process held. */
__attribute__((destructor)) static void give_back_all(void) {
    if (!g_state) return;
    for (int d = 0; d < g_count; d++) {
        hami_fake_proc *p = g_proc[d];
        if (!p) continue;
        uint64_t b = __atomic_exchange_n(&p->used_bytes, 0, __ATOMIC_ACQ_REL);
        __atomic_fetch_sub(&state_of(d)->used_bytes, b, __ATOMIC_ACQ_REL);
    }
}

EXPORT CUresult cuInit(unsigned int Flags) { return ready() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    *count = g_count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!valid_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "HAMi Fake GPU %d", dev);
    return CUDA_SUCCESS;
}

/* Identity of a state device: from the fake NVML's fixture ($HAMI_FAKE_NVML_FIXTURE,
 * "uuid =" and "bus_id =" of the matching [gpu] section) when one is set, so the
 * two fakes describe the same GPUs; otherwise the fake NVML's defaults. */
static void identity(int index, char uuid[96], char bus_id[32]) {
    snprintf(uuid, 96, "GPU-00000000-0000-0000-0000-%012x", (unsigned)index);
    snprintf(bus_id, 32, "00000000:%02X:00.0", 0x10 + (unsigned)index);
    const char *path = getenv("HAMI_FAKE_NVML_FIXTURE");
    FILE *f = path && *path ? fopen(path, "re") : NULL;
    if (!f) return;
    char line[512];
    int section = -1;
    while (fgets(line, sizeof line, f)) {
        char key[64], value[128];
        if (strncmp(line, "[gpu]", 5) == 0) {
            if (++section == index) {
                /* Defaults for this index, as the fake NVML gives them. */
                snprintf(uuid, 96, "GPU-00000000-0000-0000-0000-%012x", (unsigned)index);
                snprintf(bus_id, 32, "00000000:%02X:00.0", 0x10 + (unsigned)index);
            }
            continue;
        }
        if (section != index || sscanf(line, " %63[^= ] = %127s", key, value) != 2) continue;
        if (!strcmp(key, "uuid")) snprintf(uuid, 96, "%.95s", value);
        else if (!strcmp(key, "bus_id")) snprintf(bus_id, 32, "%.31s", value);
    }
    fclose(f);
}

EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    char uuid[96], bus[32];
    unsigned int d = 0, b = 0, v = 0, fn = 0;
    identity(g_order[dev], uuid, bus);
    sscanf(bus, "%x:%x:%x.%x", &d, &b, &v, &fn);
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%x", d, b, v, fn); /* CUDA's form: 0000:18:00.0 */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *out, CUdevice dev) {
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    char uuid[96], bus[32];
    identity(g_order[dev], uuid, bus);
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
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = state_of(dev)->total_bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *pctx = &g_ctx[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    return valid_dev(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { t_ctx = ctx; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { *pctx = t_ctx; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return current_dev(device); }
EXPORT CUresult cuCtxSynchronize(void) {
    int dev;
    CUresult rc = current_dev(&dev);
    if (rc == CUDA_SUCCESS) hami_fake_synchronize(state_of(dev));
    return rc;
}

/* ---- memory ---- */

static CUresult take(int dev, uint64_t bytes) {
    hami_fake_device *d = state_of(dev);
    if (hami_fake_mem_take(d, proc_of(dev), bytes) == 0) return CUDA_SUCCESS;
    if (hami_fake_reap_dead(d) > 0 && hami_fake_mem_take(d, proc_of(dev), bytes) == 0) return CUDA_SUCCESS;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult alloc_on(int dev, CUdeviceptr *dptr, size_t bytes) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take(dev, bytes);
    if (rc != CUDA_SUCCESS) return rc;
    /* Addresses are never reused within a process, so a stale free cannot hit a new block. */
    uint64_t addr = __atomic_fetch_add(&g_next_addr, (bytes + 511) & ~511ull, __ATOMIC_RELAXED);
    hami_ptrmap_put(&g_ptrs, addr, bytes, dev);
    *dptr = addr;
    return CUDA_SUCCESS;
}

static CUresult alloc_current(CUdeviceptr *dptr, size_t bytes) {
    int dev;
    CUresult rc = current_dev(&dev);
    return rc != CUDA_SUCCESS ? rc : alloc_on(dev, dptr, bytes);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return alloc_current(dptr, bytesize); }

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    return alloc_current(dptr, bytesize);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes) {
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    CUresult rc = alloc_current(dptr, pitch * Height);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    if (hStream) return alloc_on(hStream->device, dptr, bytesize);
    return alloc_current(dptr, bytesize);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&g_ptrs, dptr, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    hami_fake_mem_give(state_of(dev), proc_of(dev), size);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return cuMemFree_v2(dptr); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFree_v2(dptr); }

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    if (!handle || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    int dev = prop->location.id;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = take(dev, size);
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t h = __atomic_fetch_add(&g_next_handle, 1, __ATOMIC_RELAXED);
    hami_ptrmap_put(&g_handles, h, size, dev);
    *handle = h;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&g_handles, handle, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    hami_fake_mem_give(state_of(dev), proc_of(dev), size);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    int dev;
    CUresult rc = current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    hami_fake_device *d = state_of(dev);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    *total = d->total_bytes;
    *free_ = used < d->total_bytes ? d->total_bytes - used : 0;
    return CUDA_SUCCESS;
}

/* ---- modules, streams, launches ---- */

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { *module = &g_module; return CUDA_SUCCESS; }

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    *hfunc = &g_function;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    int dev;
    CUresult rc = current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    struct CUstream_st *s = malloc(sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->device = dev;
    *phStream = s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    if (hStream && ready()) {
        hami_fake_synchronize(state_of(hStream->device));
        return CUDA_SUCCESS;
    }
    return cuCtxSynchronize();
}

static CUresult run(CUstream stream) {
    int dev;
    if (stream) {
        if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
        dev = stream->device;
    } else {
        CUresult rc = current_dev(&dev);
        if (rc != CUDA_SUCCESS) return rc;
    }
    uint64_t ns = t_kernel_ns != UINT64_MAX ? t_kernel_ns : g_default_kernel_ns;
    hami_fake_run_kernel(state_of(dev), proc_of(dev), ns);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                               void **extra) {
    return run(s);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm, CUstream s,
                                    void **params, void **extra) {
    return run(s);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    return config ? run(config->hStream) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(config, f, params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                          CUstream s, void **params) {
    return run(s);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                               CUstream s, void **params) {
    return run(s);
}

EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    static struct CUgraph_st graph;
    *phGraph = &graph;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    static struct CUgraphExec_st exec;
    *phGraphExec = &exec;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph hGraph) { return CUDA_SUCCESS; }
EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) { return CUDA_SUCCESS; }

/* A fake graph is one kernel of the thread's current duration. */
EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) { return run(hStream); }
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) { return run(hStream); }

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
    switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; break;
    default: *pStr = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}
