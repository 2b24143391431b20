/* The stream-ordered allocator (cuMemAllocAsync, cuMemAllocFromPoolAsync,
 * cuMemFreeAsync) and its memory pools.
 *
 * A pool holds device memory beyond its live allocations: a cuMemFreeAsync
 * returns memory to the pool only when the stream reaches it, and the pool
 * gives it back to the device only at a synchronisation (above its release
 * threshold) or a cuMemPoolTrimTo.  So a pool is charged for what it really
 * holds -- its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT -- not for its
 * allocations:
 *   - an allocation reserves its size rounded up to the allocation
 *     granularity (the most the pool can grow by for it) *before* the driver
 *     call; afterwards the pool's charge is set to its reserved memory, which
 *     gives back whatever the pool did not need to grow;
 *   - frees give nothing back by themselves; after each synchronisation (and
 *     before a memory query) every pool's charge is lowered to what it still
 *     reserves;
 *   - when the limit refuses anything, this process's pools are trimmed
 *     (cuMemPoolTrimTo 0: only idle memory goes) and the refusal retried.
 * Each pool has a lock held from its reservation to its settlement, so the
 * pool cannot grow unseen between the two.  cuMemAllocAsync draws from the
 * current pool of the stream's device, which is the device charged. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_shim.h"

#define MAX_POOLS 256
#define FALLBACK_GRANULARITY (2ull << 20)

typedef struct shim_pool {
    CUmemoryPool pool; /* NULL: a free entry */
    int dev;           /* region device charged; -1: not device memory (a host pool) */
    int destroyed;     /* cuMemPoolDestroy'ed with allocations outstanding */
    uint64_t charge;   /* bytes reserved in the region for this pool */
    int64_t live;      /* allocations not yet freed */
    pthread_mutex_t mu;
} shim_pool;

static shim_pool g_pools[MAX_POOLS];
static int g_count; /* entries ever used (a high-water mark; scans stop here) */
static pthread_mutex_t g_table_mu = PTHREAD_MUTEX_INITIALIZER;
static hami_ptrmap g_ptrs; /* allocation -> (size, pool entry) */
static uint64_t g_granularity[HAMI_REGION_MAX_DEVICES];
static int g_warned;

static uint64_t granularity(int dev) {
    if (dev < 0 || dev >= HAMI_REGION_MAX_DEVICES) return FALLBACK_GRANULARITY;
    uint64_t g = __atomic_load_n(&g_granularity[dev], __ATOMIC_RELAXED);
    if (g) return g;
    size_t got = 0;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    if (!hami_real.cuMemGetAllocationGranularity ||
        hami_real.cuMemGetAllocationGranularity(&got, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        got == 0)
        got = FALLBACK_GRANULARITY;
    __atomic_store_n(&g_granularity[dev], (uint64_t)got, __ATOMIC_RELAXED);
    return got;
}

static shim_pool *find(CUmemoryPool pool) {
    int n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&g_pools[i].pool, __ATOMIC_ACQUIRE) == pool) return &g_pools[i];
    return NULL;
}

/* The device a pool we did not see created belongs to: some device's default or current pool. */
static int device_of(CUmemoryPool pool, int fallback) {
    int count = 0;
    if (hami_real.cuDeviceGetCount && hami_real.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
    for (int d = 0; d < count && d < HAMI_REGION_MAX_DEVICES; d++) {
        CUmemoryPool p = NULL;
        if (hami_real.cuDeviceGetMemPool && hami_real.cuDeviceGetMemPool(&p, d) == CUDA_SUCCESS && p == pool)
            return d;
        if (hami_real.cuDeviceGetDefaultMemPool && hami_real.cuDeviceGetDefaultMemPool(&p, d) == CUDA_SUCCESS &&
            p == pool)
            return d;
    }
    return fallback;
}

static shim_pool *track(CUmemoryPool pool, int dev) {
    shim_pool *sp = find(pool);
    if (sp) return sp;
    pthread_mutex_lock(&g_table_mu);
    sp = find(pool);
    for (int i = 0; !sp && i < MAX_POOLS; i++) {
        shim_pool *e = &g_pools[i];
        if (__atomic_load_n(&e->pool, __ATOMIC_ACQUIRE)) continue;
        /* A retired entry may still be locked by a thread finishing its settlement: take its
         * lock (statically initialised, never re-initialised) before reusing it. */
        pthread_mutex_lock(&e->mu);
        int free_entry = !e->pool && !e->charge && !e->live;
        if (free_entry) {
            e->dev = dev;
            e->destroyed = 0;
            __atomic_store_n(&e->pool, pool, __ATOMIC_RELEASE);
            if (i >= g_count) __atomic_store_n(&g_count, i + 1, __ATOMIC_RELEASE);
            sp = e;
        }
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_unlock(&g_table_mu);
    return sp;
}

/* Sets the pool's charge to the memory it reserves.  Caller holds sp->mu. */
static uint64_t settle_locked(shim_pool *sp, int synchronised) {
    if (sp->dev < 0) return 0;
    uint64_t before = sp->charge;
    if (sp->destroyed) {
        /* The driver frees a destroyed pool once its last allocation is freed; its
         * attributes can no longer be read, so wait for a synchronisation after that. */
        if (sp->live == 0 && synchronised && sp->charge) {
            hami_shim_release(sp->dev, sp->charge);
            sp->charge = 0;
        }
        if (sp->live == 0 && sp->charge == 0) __atomic_store_n(&sp->pool, NULL, __ATOMIC_RELEASE);
        return before - sp->charge;
    }
    cuuint64_t reserved = 0;
    if (!hami_real.cuMemPoolGetAttribute ||
        hami_real.cuMemPoolGetAttribute(sp->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS)
        return 0; /* cannot tell: keep the charge */
    if (reserved < sp->charge) {
        hami_shim_release(sp->dev, sp->charge - reserved);
        sp->charge = reserved;
    } else if (reserved > sp->charge) {
        /* Grown where no wrapper saw it (or tracked only now): count it if the limit allows. */
        if (hami_shim_try_reserve(sp->dev, reserved - sp->charge) == HAMI_OK) { /* no call of the application's is refused */
            sp->charge = reserved;
        } else if (!__atomic_exchange_n(&g_warned, 1, __ATOMIC_RELAXED)) {
            fprintf(stderr, "[hami-limiter/CUDA] a memory pool holds %llu bytes more than this allocation's "
                    "limit leaves; they are not counted\n", (unsigned long long)(reserved - sp->charge));
        }
    }
    return before > sp->charge ? before - sp->charge : 0;
}

void hami_cuda_pools_settle(int synchronised) {
    int n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        shim_pool *sp = &g_pools[i];
        if (!__atomic_load_n(&sp->pool, __ATOMIC_ACQUIRE)) continue;
        pthread_mutex_lock(&sp->mu);
        if (sp->pool) settle_locked(sp, synchronised);
        pthread_mutex_unlock(&sp->mu);
    }
}

uint64_t hami_cuda_pools_trim(int dev, const void *held) {
    uint64_t freed = 0;
    int n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        shim_pool *sp = &g_pools[i];
        if (!__atomic_load_n(&sp->pool, __ATOMIC_ACQUIRE) || sp->dev != dev || sp->destroyed) continue;
        /* Another thread inside this pool's allocation holds its lock: skip it rather than
         * wait (it may be waiting for a pool this thread holds). */
        int mine = sp == held;
        if (!mine && pthread_mutex_trylock(&sp->mu) != 0) continue;
        if (sp->pool && sp->charge && hami_real.cuMemPoolTrimTo) {
            hami_real.cuMemPoolTrimTo(sp->pool, 0); /* only idle memory: live and pending allocations stay */
            freed += settle_locked(sp, 0);
        }
        if (!mine) pthread_mutex_unlock(&sp->mu);
    }
    return freed;
}

typedef CUresult (*alloc_call)(CUdeviceptr *, size_t, CUmemoryPool, CUstream, void *);

static CUresult alloc_in(shim_pool *sp, CUdeviceptr *dptr, size_t bytes, CUstream s, alloc_call call, void *ctx) {
    CUmemoryPool pool = sp->pool;
    if (sp->dev < 0) return call(dptr, bytes, pool, s, ctx); /* host memory */
    pthread_mutex_lock(&sp->mu);
    uint64_t g = granularity(sp->dev);
    uint64_t most = (bytes + g - 1) / g * g; /* the pool grows by whole chunks */
    if (!most) most = g;
    CUresult rc = hami_cuda_reserve(sp->dev, most, sp);
    if (rc == CUDA_SUCCESS) {
        sp->charge += most;
        rc = call(dptr, bytes, pool, s, ctx);
        if (rc == CUDA_SUCCESS && dptr) {
            hami_ptrmap_put(&g_ptrs, *dptr, bytes, (int32_t)(sp - g_pools));
            sp->live++;
        }
        settle_locked(sp, 0); /* what the pool did not need goes back now */
    }
    pthread_mutex_unlock(&sp->mu);
    return rc;
}

static CUresult call_from_pool(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *ctx) {
    return hami_real.cuMemAllocFromPoolAsync(d, n, p, s);
}
static CUresult call_from_pool_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *ctx) {
    return hami_real.cuMemAllocFromPoolAsync_ptsz(d, n, p, s);
}
static CUresult call_async(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *ctx) {
    return hami_real.cuMemAllocAsync(d, n, s);
}
static CUresult call_async_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *ctx) {
    return hami_real.cuMemAllocAsync_ptsz(d, n, s);
}

static CUresult from_pool(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s, alloc_call call) {
    if (!hami_shim_accounting() || !pool) return call(dptr, bytes, pool, s, NULL);
    shim_pool *sp = track(pool, -2);
    if (!sp) return CUDA_ERROR_OUT_OF_MEMORY; /* more pools than tracked: refuse rather than not count */
    if (sp->dev == -2) sp->dev = device_of(pool, hami_cuda_stream_device(s));
    return alloc_in(sp, dptr, bytes, s, call, NULL);
}

static CUresult stream_ordered(CUdeviceptr *dptr, size_t bytes, CUstream s, alloc_call call) {
    if (!hami_shim_accounting()) return call(dptr, bytes, NULL, s, NULL);
    int dev = hami_cuda_stream_device(s);
    CUmemoryPool pool = NULL;
    if (!hami_real.cuDeviceGetMemPool || hami_real.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS || !pool) {
        /* No pool to watch: charge the allocation as a plain one, on the stream's device. */
        CUresult rc = hami_cuda_reserve(dev, bytes, NULL);
        if (rc != CUDA_SUCCESS) return rc;
        rc = call(dptr, bytes, NULL, s, NULL);
        if (rc == CUDA_SUCCESS) hami_ptrmap_put(&hami_cuda_ptrs, *dptr, bytes, dev);
        else hami_shim_release(dev, bytes);
        return rc;
    }
    shim_pool *sp = track(pool, dev);
    if (!sp) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sp->dev == -2) sp->dev = dev;
    return alloc_in(sp, dptr, bytes, s, call, NULL);
}

HAMI_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemAllocAsync);
    return stream_ordered(dptr, bytesize, hStream, call_async);
}

HAMI_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemAllocAsync_ptsz);
    return stream_ordered(dptr, bytesize, hStream, call_async_ptsz);
}

HAMI_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemAllocFromPoolAsync);
    return from_pool(dptr, bytesize, pool, hStream, call_from_pool);
}

HAMI_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                  CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemAllocFromPoolAsync_ptsz);
    return from_pool(dptr, bytesize, pool, hStream, call_from_pool_ptsz);
}

int hami_cuda_pool_free(uint64_t ptr, CUresult (*call)(uint64_t, void *), void *ctx, int async, CUresult *rc) {
    uint64_t size;
    int32_t index;
    if (hami_ptrmap_take(&g_ptrs, ptr, &size, &index) != 0) return 0;
    *rc = call(ptr, ctx);
    if (*rc != CUDA_SUCCESS) {
        hami_ptrmap_put(&g_ptrs, ptr, size, index);
        return 1;
    }
    shim_pool *sp = &g_pools[index];
    pthread_mutex_lock(&sp->mu);
    sp->live--;
    /* cuMemFree returns the memory to the pool at once, cuMemFreeAsync when the stream gets
     * there; either way the pool keeps it, and the charge moves only with its reserved memory. */
    if (!async) settle_locked(sp, 1);
    pthread_mutex_unlock(&sp->mu);
    return 1;
}

HAMI_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemPoolCreate);
    CUresult rc = hami_real.cuMemPoolCreate(pool, poolProps);
    if (rc == CUDA_SUCCESS && hami_shim_accounting() && pool && poolProps) {
        int device_memory = poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
        track(*pool, device_memory ? poolProps->location.id : -1);
    }
    return rc;
}

HAMI_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemPoolDestroy);
    shim_pool *sp = hami_shim_accounting() ? find(pool) : NULL;
    if (!sp) return hami_real.cuMemPoolDestroy(pool);
    pthread_mutex_lock(&sp->mu);
    CUresult rc = hami_real.cuMemPoolDestroy(pool);
    if (rc == CUDA_SUCCESS) {
        if (sp->live == 0) { /* nothing outstanding: the pool's memory is gone now */
            if (sp->dev >= 0 && sp->charge) hami_shim_release(sp->dev, sp->charge);
            sp->charge = 0;
            __atomic_store_n(&sp->pool, NULL, __ATOMIC_RELEASE);
        } else {
            sp->destroyed = 1;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return rc;
}

HAMI_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMemPoolTrimTo);
    shim_pool *sp = hami_shim_accounting() ? find(pool) : NULL;
    if (!sp) return hami_real.cuMemPoolTrimTo(pool, minBytesToKeep);
    pthread_mutex_lock(&sp->mu);
    CUresult rc = hami_real.cuMemPoolTrimTo(pool, minBytesToKeep);
    if (rc == CUDA_SUCCESS) settle_locked(sp, 0);
    pthread_mutex_unlock(&sp->mu);
    return rc;
}

void hami_cuda_pool_after_fork(void) {
    /* A forked child holds no device memory and no pools. */
    memset(g_pools, 0, sizeof g_pools);
    g_count = 0;
    pthread_mutex_init(&g_table_mu, NULL);
    hami_ptrmap_after_fork(&g_ptrs);
}
