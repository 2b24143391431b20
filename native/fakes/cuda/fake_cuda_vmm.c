/* The fake's virtual memory management, on CUDA's semantics: cuMemCreate takes
 * physical memory and returns a handle; cuMemMap maps it into a reserved range;
 * the physical memory is freed only when its last mapping is unmapped *and*
 * every reference to the handle (creation, cuMemRetainAllocationHandle) is
 * released -- in either order.  A released handle's value is no longer valid
 * for the caller even while its memory stays mapped. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fake_cuda.h"

typedef struct fake_handle {
    uint64_t handle, size;
    int device;
    int refs;  /* creation + retains not yet released */
    int maps;  /* live mappings */
    int shared; /* entry of fake_cuda_share.c once exported or imported, else -1 */
    uint64_t export_id;
    struct fake_handle *next;
} fake_handle;

typedef struct fake_mapping {
    uint64_t va, size;
    fake_handle *h;
    struct fake_mapping *next;
} fake_mapping;

static fake_handle *g_handles;
static fake_mapping *g_maps;
static uint64_t g_next_handle = 0x1000;

static fake_handle *find_live(uint64_t handle) {
    for (fake_handle *h = g_handles; h; h = h->next)
        if (h->handle == handle && h->refs > 0) return h;
    return NULL;
}

static void drop_if_unused(fake_handle *h) {
    if (h->refs > 0 || h->maps > 0) return;
    for (fake_handle **pp = &g_handles; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    if (h->shared >= 0) fake_share_drop(h->shared); /* other processes may hold it still */
    else fake_give(h->device, h->size);
    free(h);
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    *granularity = FAKE_GRANULARITY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    if (!handle || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || size % FAKE_GRANULARITY) return CUDA_ERROR_INVALID_VALUE; /* must be granularity-aligned */
    int dev = prop->location.id;
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    fake_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fake_take(dev, size);
    if (rc != CUDA_SUCCESS) {
        free(h);
        return rc;
    }
    pthread_mutex_lock(&fake_mu);
    h->handle = g_next_handle++;
    h->size = size;
    h->device = dev;
    h->refs = 1;
    h->shared = -1;
    h->next = g_handles;
    g_handles = h;
    pthread_mutex_unlock(&fake_mu);
    *handle = h->handle;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    if (!fake_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&fake_mu);
    fake_handle *h = find_live(handle);
    if (h) {
        h->refs--;
        drop_if_unused(h); /* still mapped: the memory stays */
    }
    pthread_mutex_unlock(&fake_mu);
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
    if (!ptr || size == 0 || size % FAKE_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    *ptr = fake_new_va(size);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return ptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    if (!ptr || size == 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE; /* offset: "currently must be zero" */
    fake_mapping *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_mu);
    fake_handle *h = find_live(handle);
    CUresult rc = h && size <= h->size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (fake_mapping *o = g_maps; o && rc == CUDA_SUCCESS; o = o->next)
        if (ptr < o->va + o->size && o->va < ptr + size) rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
    if (rc == CUDA_SUCCESS) {
        m->va = ptr;
        m->size = size;
        m->h = h;
        m->next = g_maps;
        g_maps = m;
        h->maps++;
    }
    pthread_mutex_unlock(&fake_mu);
    if (rc != CUDA_SUCCESS) free(m);
    return rc;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    int found = 0;
    /* Whole mappings only, as CUDA requires: every mapping inside [ptr, ptr + size). */
    for (fake_mapping **pp = &g_maps; *pp;) {
        fake_mapping *m = *pp;
        if (m->va >= ptr && m->va + m->size <= ptr + size) {
            *pp = m->next;
            m->h->maps--;
            drop_if_unused(m->h); /* its handle already released: the memory goes now */
            free(m);
            found++;
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&fake_mu);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&fake_mu);
    fake_mapping *m = g_maps;
    while (m && !(a >= m->va && a < m->va + m->size)) m = m->next;
    if (m) {
        /* Another reference to the same memory (the value may be a released one's: it is live again). */
        m->h->refs++;
        *handle = m->h->handle;
    }
    pthread_mutex_unlock(&fake_mu);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    return ptr && desc && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType, unsigned long long flags) {
    if (!shareableHandle) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&fake_mu);
    fake_handle *h = find_live(handle);
    CUresult rc = h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    uint64_t id = 0;
    if (h && h->shared < 0) {
        h->shared = fake_share_export(h->device, h->size, &id);
        if (h->shared < 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else h->export_id = id;
    }
    int fd = rc == CUDA_SUCCESS ? fake_share_token_fd(h->shared, h->export_id) : -1;
    pthread_mutex_unlock(&fake_mu);
    if (rc == CUDA_SUCCESS && fd < 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) *(int *)shareableHandle = fd;
    return rc;
}

/* Another handle to the same physical memory: this process holds it until released (and unmapped). */
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType) {
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    fake_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_mu);
    uint64_t size = 0;
    int device = 0;
    int entry = fake_share_import((int)(intptr_t)osHandle, &size, &device);
    if (entry >= 0) {
        h->handle = g_next_handle++;
        h->size = size;
        h->device = device;
        h->refs = 1;
        h->shared = entry;
        h->next = g_handles;
        g_handles = h;
        *handle = h->handle;
    }
    pthread_mutex_unlock(&fake_mu);
    if (entry < 0) free(h);
    return entry >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
