/* Virtual memory management (cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease).
 *
 * cuMemCreate allocates physical memory, so that is where it is reserved.  It
 * is freed only when the last mapping of it is unmapped *and* every reference
 * to its handle (the creation, each cuMemRetainAllocationHandle) is released,
 * in either order: create -> map -> release leaves the memory in use, and the
 * reservation stays until the unmap.  Process-local bookkeeping: handles by
 * value, mappings by start address (each pointing at its handle's record, so
 * a handle value the driver hands out again cannot be confused with it).
 *
 * A handle exported as a POSIX file descriptor can be imported by any process
 * (this one too), and every imported handle keeps the physical memory alive.
 * Such an allocation is charged through the region, once, keyed by the
 * exported descriptor's file: the exporter's charge becomes the region entry's,
 * each importing process joins it as a holder, and the charge moves from holder
 * to holder until the last one lets go -- or dies. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda_shim.h"

#define BUCKETS 4096u

typedef struct vmm_handle {
    uint64_t handle, size;
    int32_t dev;
    int32_t refs; /* the creation + retains not yet released */
    int64_t maps; /* live mappings */
    int32_t shared; /* region entry of an exported or imported allocation, else -1 */
    struct vmm_handle *next;
} vmm_handle;

typedef struct vmm_mapping {
    uint64_t va, size;
    vmm_handle *h;
    struct vmm_mapping *next;
} vmm_mapping;

static vmm_handle *g_handles[BUCKETS];
static int g_holds[HAMI_REGION_MAX_SHARED]; /* this process's records of each shared entry */
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
    if (h->shared < 0) hami_shim_release(h->dev, h->size); /* the driver has freed the physical memory */
    else if (--g_holds[h->shared] == 0) hami_shim_leave_shared(h->shared); /* others may hold it still */
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
        h->shared = -1;
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

static int file_key(int fd, uint64_t *key_dev, uint64_t *key_ino) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return -1;
    *key_dev = (uint64_t)st.st_dev;
    *key_ino = (uint64_t)st.st_ino;
    return 0;
}

HAMI_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemExportToShareableHandle);
    CUresult rc = hami_real.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
    if (rc != CUDA_SUCCESS || !hami_shim_accounting() || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !shareableHandle)
        return rc;
    uint64_t kd, ki;
    if (file_key(*(int *)shareableHandle, &kd, &ki) != 0) return rc;
    pthread_mutex_lock(&g_mu);
    vmm_handle *h = live_handle(handle);
    if (h && h->shared < 0) {
        int entry = hami_shim_share(h->dev, h->size, kd, ki);
        if (entry >= 0) { /* the record's charge is the entry's now */
            h->shared = entry;
            g_holds[entry]++;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

HAMI_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                    CUmemAllocationHandleType shHandleType) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemImportFromShareableHandle);
    if (!hami_shim_accounting() || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !handle)
        return hami_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    vmm_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t kd, ki, size = 0;
    int dev = 0, entry = -1;
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    /* Exported by a process of this allocation: hold it with them.  (Another allocation's memory is
     * charged there, as long as its exporter holds it.) */
    if (rc == CUDA_SUCCESS && file_key((int)(intptr_t)osHandle, &kd, &ki) == 0) entry = hami_shim_join(kd, ki, &size, &dev);
    if (entry >= 0) {
        h->handle = *handle;
        h->size = size;
        h->dev = dev;
        h->refs = 1;
        h->shared = entry;
        h->next = g_handles[bucket(h->handle)];
        g_handles[bucket(h->handle)] = h;
        g_holds[entry]++;
        h = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    free(h);
    return rc;
}

void hami_cuda_vmm_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    memset(g_holds, 0, sizeof g_holds);
    for (unsigned b = 0; b < BUCKETS; b++) g_handles[b] = NULL, g_maps[b] = NULL;
    g_nmaps = 0;
}
