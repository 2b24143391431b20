/* Virtual memory management (cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease).
 *
 * cuMemCreate allocates physical memory, so that is where it is reserved.  It
 * is freed only when the last mapping of it is unmapped *and* every reference
 * to its handle (the creation, each cuMemRetainAllocationHandle) is released,
 * in either order: create -> map -> release leaves the memory in use, and the
 * reservation stays until the unmap.  Process-local bookkeeping: handles by
 * value, mappings by start address (each pointing at its handle's record, so
 * a handle value the driver hands out again cannot be confused with it). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "cuda_shim.h"

#define BUCKETS 4096u

typedef struct vmm_handle {
    uint64_t handle, size;
    int32_t dev;
    int32_t refs; /* the creation + retains not yet released */
    int64_t maps; /* live mappings */
    struct vmm_handle *next;
} vmm_handle;

typedef struct vmm_mapping {
    uint64_t va, size;
    vmm_handle *h;
    struct vmm_mapping *next;
} vmm_mapping;

static vmm_handle *g_handles[BUCKETS];
static vmm_mapping *g_maps[BUCKETS];
static uint64_t g_nmaps;
/* Held across the driver calls, so that a handle value the driver frees and
 * hands out again is recorded only after the old record is gone. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (unsigned)(k % BUCKETS);
}

static vmm_handle *live_handle(uint64_t handle) {
    for (vmm_handle *h = g_handles[bucket(handle)]; h; h = h->next)
        if (h->handle == handle && h->refs > 0) return h;
    return NULL;
}

static void drop_if_unused(vmm_handle *h) {
    if (h->refs > 0 || h->maps > 0) return;
    for (vmm_handle **pp = &g_handles[bucket(h->handle)]; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    hami_shim_release(h->dev, h->size); /* the driver has freed the physical memory */
    free(h);
}

static vmm_mapping *take_mapping(uint64_t va) {
    for (vmm_mapping **pp = &g_maps[bucket(va)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->va == va) {
            vmm_mapping *m = *pp;
            *pp = m->next;
            g_nmaps--;
            return m;
        }
    }
    return NULL;
}

static vmm_mapping *mapping_containing(uint64_t addr) {
    for (vmm_mapping *m = g_maps[bucket(addr)]; m; m = m->next)
        if (m->va == addr) return m;
    /* Not a mapping's start: rare (cuMemRetainAllocationHandle inside a range), so a full scan. */
    for (unsigned b = 0; b < BUCKETS; b++)
        for (vmm_mapping *m = g_maps[b]; m; m = m->next)
            if (addr >= m->va && addr < m->va + m->size) return m;
    return NULL;
}

HAMI_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemCreate);
    /* Only device memory counts; host (NUMA) allocations pass through. */
    if (!hami_shim_accounting() || !handle || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return hami_real.cuMemCreate(handle, size, prop, flags);
    int dev = prop->location.id;
    vmm_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = hami_cuda_reserve(dev, size, NULL);
    if (rc != CUDA_SUCCESS) {
        free(h);
        return rc;
    }
    pthread_mutex_lock(&g_mu);
    rc = hami_real.cuMemCreate(handle, size, prop, flags);
    if (rc == CUDA_SUCCESS) {
        h->handle = *handle;
        h->size = size;
        h->dev = dev;
        h->refs = 1;
        h->next = g_handles[bucket(h->handle)];
        g_handles[bucket(h->handle)] = h;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc != CUDA_SUCCESS) {
        hami_shim_release(dev, size);
        free(h);
    }
    return rc;
}

HAMI_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemRelease);
    if (!hami_shim_accounting()) return hami_real.cuMemRelease(handle);
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuMemRelease(handle);
    vmm_handle *h = rc == CUDA_SUCCESS ? live_handle(handle) : NULL;
    if (h) {
        h->refs--;
        drop_if_unused(h); /* still mapped: the memory -- and its reservation -- stay */
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

HAMI_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemMap);
    if (!hami_shim_accounting()) return hami_real.cuMemMap(ptr, size, offset, handle, flags);
    vmm_mapping *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuMemMap(ptr, size, offset, handle, flags);
    vmm_handle *h = rc == CUDA_SUCCESS ? live_handle(handle) : NULL;
    if (h) { /* a handle we did not see created (imported from another process) is not ours to count */
        h->maps++;
        m->va = ptr;
        m->size = size;
        m->h = h;
        m->next = g_maps[bucket(ptr)];
        g_maps[bucket(ptr)] = m;
        g_nmaps++;
        m = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    free(m);
    return rc;
}

HAMI_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemUnmap);
    if (!hami_shim_accounting()) return hami_real.cuMemUnmap(ptr, size);
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuMemUnmap(ptr, size);
    /* The range covers whole mappings, one after the other from ptr. */
    for (uint64_t va = ptr; rc == CUDA_SUCCESS && va < ptr + size;) {
        vmm_mapping *m = take_mapping(va);
        if (!m) break;
        va = m->va + m->size;
        m->h->maps--;
        drop_if_unused(m->h); /* its handle was released already: the memory is freed now */
        free(m);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

HAMI_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemRetainAllocationHandle);
    if (!hami_shim_accounting()) return hami_real.cuMemRetainAllocationHandle(handle, addr);
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuMemRetainAllocationHandle(handle, addr);
    vmm_mapping *m = rc == CUDA_SUCCESS ? mapping_containing((uint64_t)(uintptr_t)addr) : NULL;
    if (m) {
        /* One more reference the application must release before the memory can go.  (CUDA returns
         * the value the handle was created with; were it another, its release would not be
         * matched and the reservation would stay until exit: never fewer bytes than held.) */
        m->h->refs++;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void hami_cuda_vmm_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    for (unsigned b = 0; b < BUCKETS; b++) g_handles[b] = NULL, g_maps[b] = NULL;
    g_nmaps = 0;
}
