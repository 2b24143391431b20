/* The fake's stream-ordered allocator: memory pools as the real driver keeps them.
 *
 * A pool holds `reserved` bytes of device memory, of which `used` back live
 * allocations and `pending` back allocations freed with cuMemFreeAsync whose
 * stream has not reached the free yet; the rest is idle.  An allocation is
 * served from idle memory when there is enough, otherwise the pool grows by
 * whole FAKE_GRANULARITY chunks.  Memory goes back to the device only at a
 * synchronisation (down to the release threshold, default 0) or through
 * cuMemPoolTrimTo -- never at the free itself. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define MAX_POOLS 64
#define ALIGN 512ull

struct CUmemPoolHandle_st {
    int in_use;
    int device;      /* -1: a host pool (not device memory) */
    int is_default;
    int destroyed;
    uint64_t reserved, used, pending, threshold;
    uint64_t reserved_high, used_high;
};

static struct CUmemPoolHandle_st g_pools[MAX_POOLS];
static CUmemoryPool g_default[HAMI_FAKE_GPU_MAX_DEVICES], g_current[HAMI_FAKE_GPU_MAX_DEVICES];
static hami_ptrmap g_pool_ptrs; /* allocation -> (size, pool index) */

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static void give_back(CUmemoryPool p, uint64_t bytes) {
    if (!bytes) return;
    p->reserved -= bytes;
    if (p->device >= 0) fake_give(p->device, bytes);
}

static void forget_if_empty(CUmemoryPool p) {
    /* A destroyed pool releases everything once its last allocation is freed. */
    if (p->destroyed && p->used == 0 && p->pending == 0) {
        give_back(p, p->reserved);
        memset(p, 0, sizeof *p);
    }
}

static CUmemoryPool new_pool_locked(int device) {
    for (int i = 0; i < MAX_POOLS; i++) {
        if (!g_pools[i].in_use) {
            memset(&g_pools[i], 0, sizeof g_pools[i]);
            g_pools[i].in_use = 1;
            g_pools[i].device = device;
            return &g_pools[i];
        }
    }
    return NULL;
}

static CUmemoryPool default_pool_locked(int dev) {
    if (!g_default[dev]) {
        g_default[dev] = new_pool_locked(dev);
        if (g_default[dev]) g_default[dev]->is_default = 1;
    }
    if (!g_current[dev]) g_current[dev] = g_default[dev];
    return g_current[dev];
}

static int valid_pool(CUmemoryPool p) {
    return p >= g_pools && p < g_pools + MAX_POOLS && p->in_use && !p->destroyed;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fake_mu);
    default_pool_locked(dev);
    *pool_out = g_default[dev];
    pthread_mutex_unlock(&fake_mu);
    return *pool_out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fake_mu);
    *pool = default_pool_locked(dev);
    pthread_mutex_unlock(&fake_mu);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fake_mu);
    CUresult rc = valid_pool(pool) && pool->device == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        default_pool_locked(dev);
        g_current[dev] = pool;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (!pool || !props || !fake_ready()) return CUDA_ERROR_INVALID_VALUE;
    int dev = -1;
    if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!fake_valid_dev(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
        dev = props->location.id;
    } else if (props->location.type != CU_MEM_LOCATION_TYPE_HOST) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&fake_mu);
    *pool = new_pool_locked(dev);
    pthread_mutex_unlock(&fake_mu);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    pthread_mutex_lock(&fake_mu);
    CUresult rc = CUDA_SUCCESS;
    if (!valid_pool(pool) || pool->is_default) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Returns at once; the pool's memory is freed once nothing is allocated from it. */
        pool->destroyed = 1;
        for (int d = 0; d < HAMI_FAKE_GPU_MAX_DEVICES; d++)
            if (g_current[d] == pool) g_current[d] = g_default[d];
        forget_if_empty(pool);
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    pthread_mutex_lock(&fake_mu);
    CUresult rc = valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && pool->reserved > minBytesToKeep) {
        /* Only idle memory: live allocations and frees the stream has not reached stay. */
        uint64_t idle = pool->reserved - pool->used - pool->pending;
        uint64_t excess = pool->reserved - minBytesToKeep;
        give_back(pool, idle < excess ? idle : excess);
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

static uint64_t *attr_u64(CUmemoryPool p, CUmemPool_attribute attr) {
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: return &p->threshold;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: return &p->reserved;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: return &p->reserved_high;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: return &p->used_high;
    default: return NULL;
    }
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    CUresult rc = valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        uint64_t *v = attr_u64(pool, attr);
        if (attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT) *(cuuint64_t *)value = pool->used + pool->pending;
        else if (v) *(cuuint64_t *)value = *v;
        else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
                 attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) *(int *)value = 1;
        else rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    CUresult rc = valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) pool->threshold = *(cuuint64_t *)value;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
            *attr_u64(pool, attr) = 0; /* high watermarks can only be reset */
        else if (attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
                 attr > CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

static CUresult alloc_from(CUmemoryPool pool, CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    CUstream s = fake_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t need = round_up(bytesize, ALIGN);
    pthread_mutex_lock(&fake_mu);
    CUresult rc = valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        uint64_t idle = pool->reserved - pool->used - pool->pending;
        if (idle < need) {
            uint64_t grow = round_up(need - idle, FAKE_GRANULARITY);
            rc = pool->device >= 0 ? fake_take(pool->device, grow) : CUDA_SUCCESS;
            if (rc == CUDA_SUCCESS) pool->reserved += grow;
        }
    }
    if (rc == CUDA_SUCCESS) {
        pool->used += need;
        if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
        if (pool->used > pool->used_high) pool->used_high = pool->used;
        *dptr = fake_new_va(need);
        hami_ptrmap_put(&g_pool_ptrs, *dptr, need, (int32_t)(pool - g_pools));
        s->seq++;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    return alloc_from(pool, dptr, bytesize, hStream);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
    return alloc_from(pool, dptr, bytesize, hStream);
}

/* cuMemAllocAsync: the current pool of the *stream's* device, not of the calling context's. */
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    if (!fake_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    CUstream s = fake_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    CUmemoryPool pool;
    CUresult rc = cuDeviceGetMemPool(&pool, s->device);
    return rc != CUDA_SUCCESS ? rc : alloc_from(pool, dptr, bytesize, hStream);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

int fake_pool_owns(uint64_t ptr) {
    uint64_t size;
    int32_t index;
    if (hami_ptrmap_take(&g_pool_ptrs, ptr, &size, &index) != 0) return 0;
    hami_ptrmap_put(&g_pool_ptrs, ptr, size, index);
    return 1;
}

CUresult fake_pool_free_now(uint64_t ptr) {
    uint64_t size;
    int32_t index;
    if (hami_ptrmap_take(&g_pool_ptrs, ptr, &size, &index) != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    CUmemoryPool p = &g_pools[index];
    p->used -= size;
    forget_if_empty(p);
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

CUresult fake_pool_free_async(uint64_t ptr, CUstream hStream) {
    CUstream s = fake_stream(hStream);
    if (!s) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t size;
    int32_t index;
    if (hami_ptrmap_take(&g_pool_ptrs, ptr, &size, &index) != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    CUmemoryPool p = &g_pools[index];
    CUresult rc = fake_defer_free(s, index, p->device, size);
    if (rc == CUDA_SUCCESS) {
        p->used -= size;
        p->pending += size;
    }
    pthread_mutex_unlock(&fake_mu);
    if (rc != CUDA_SUCCESS) hami_ptrmap_put(&g_pool_ptrs, ptr, size, index);
    return rc;
}

CUresult fake_defer_free(CUstream s, int pool, int device, uint64_t size) {
    fake_pending *f = malloc(sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    f->size = size;
    f->pool = pool;
    f->device = device;
    f->seq = ++s->seq;
    f->next = s->pending;
    s->pending = f;
    return CUDA_SUCCESS;
}

void fake_stream_reached(CUstream s, uint64_t seq) {
    for (fake_pending **pp = &s->pending; *pp;) {
        fake_pending *f = *pp;
        if (f->seq > seq) {
            pp = &f->next;
            continue;
        }
        if (f->pool >= 0) { /* back to its pool, which keeps it */
            CUmemoryPool p = &g_pools[f->pool];
            p->pending -= f->size;
            forget_if_empty(p);
        } else { /* a cuMemAlloc allocation: back to the device */
            fake_give(f->device, f->size);
        }
        *pp = f->next;
        free(f);
    }
}

void fake_pools_release_to_threshold(void) {
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < MAX_POOLS; i++) {
        CUmemoryPool p = &g_pools[i];
        if (!p->in_use || p->reserved <= p->threshold) continue;
        uint64_t idle = p->reserved - p->used - p->pending;
        uint64_t excess = p->reserved - p->threshold;
        give_back(p, idle < excess ? idle : excess);
    }
    pthread_mutex_unlock(&fake_mu);
}
