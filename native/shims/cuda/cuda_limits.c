/* cuCtxSetLimit: raising the device-side malloc heap, the printf FIFO or the
 * thread stack size makes the driver set device memory aside, which no
 * allocation call shows.  The shim charges what a context's limits take beyond
 * the context's own defaults (seen at the first call): the heap and FIFO sizes
 * in bytes, the stack size for every thread the device can hold at once
 * (multiprocessors x threads per multiprocessor).  It reserves before the
 * driver call, as for allocations, and settles on the value the driver really
 * set (it may round up).  Lowering a limit gives the bytes back. */
#define _GNU_SOURCE
#include <pthread.h>

#include "cuda_shim.h"

#define N_MEMORY_LIMITS 3 /* CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE */

typedef struct {
    int known;          /* base read */
    uint64_t base;      /* footprint of the context's default */
    uint64_t charged;   /* bytes charged beyond the base */
} limit_state;

static limit_state g_limits[HAMI_REGION_MAX_DEVICES][N_MEMORY_LIMITS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t footprint(int dev, CUlimit limit, size_t value) {
    if (limit != CU_LIMIT_STACK_SIZE) return value;
    int sms = 0, threads = 0;
    if (!hami_real.cuDeviceGetAttribute ||
        hami_real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        hami_real.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS)
        return 0; /* cannot size it: not charged (said in the README) */
    return (uint64_t)value * (uint64_t)(sms > 0 ? sms : 0) * (uint64_t)(threads > 0 ? threads : 0);
}

static uint64_t beyond_base(const limit_state *st, uint64_t footprint_bytes) {
    return footprint_bytes > st->base ? footprint_bytes - st->base : 0;
}

HAMI_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuCtxSetLimit);
    int dev = hami_cuda_current_device();
    if (!hami_shim_accounting() || (unsigned)limit >= N_MEMORY_LIMITS || dev < 0 || dev >= HAMI_REGION_MAX_DEVICES ||
        !hami_real.cuCtxGetLimit)
        return hami_real.cuCtxSetLimit(limit, value);
    pthread_mutex_lock(&g_mu);
    limit_state *st = &g_limits[dev][limit];
    size_t now = 0;
    if (!st->known && hami_real.cuCtxGetLimit(&now, limit) == CUDA_SUCCESS) {
        st->base = footprint(dev, limit, now);
        st->known = 1;
    }
    uint64_t want = beyond_base(st, footprint(dev, limit, value)), reserved = 0;
    CUresult rc = CUDA_SUCCESS;
    if (want > st->charged) {
        rc = hami_cuda_reserve(dev, want - st->charged, NULL);
        if (rc == CUDA_SUCCESS) reserved = want - st->charged;
    }
    if (rc == CUDA_SUCCESS) rc = hami_real.cuCtxSetLimit(limit, value);
    if (rc != CUDA_SUCCESS) {
        if (reserved) hami_shim_release(dev, reserved);
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    uint64_t held = st->charged + reserved, actual = want;
    if (hami_real.cuCtxGetLimit(&now, limit) == CUDA_SUCCESS) actual = beyond_base(st, footprint(dev, limit, now));
    /* the driver's rounding is charged where it fits; not fitting refuses nothing the application asked */
    if (actual > held && hami_shim_try_reserve(dev, actual - held) == HAMI_OK) held = actual;
    else if (actual < held) hami_shim_release(dev, held - actual), held = actual;
    /* (rounded up past the limit: the rounding stays uncharged -- a few bytes per thread at most) */
    st->charged = held;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

void hami_cuda_limits_after_fork(void) {
    /* The child has no context of its own yet: its limits start from the defaults. */
    pthread_mutex_init(&g_mu, NULL);
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++)
        for (int l = 0; l < N_MEMORY_LIMITS; l++) g_limits[d][l] = (limit_state){0, 0, 0};
}
