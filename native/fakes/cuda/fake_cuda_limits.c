/* Context limits that take device memory, as a driver sets it aside: the
 * device-side malloc heap and the printf FIFO (their size in bytes) and the
 * thread stacks (the per-thread size for every thread the device can hold at
 * once: multiprocessors x threads per multiprocessor).  The defaults come with
 * the context; what a cuCtxSetLimit raises above them is taken from the device
 * and given back when lowered again.  Other limits take no memory. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fake_cuda.h"

#define DEFAULT_STACK 1024ull          /* bytes per thread */
#define DEFAULT_FIFO (1ull << 20)
#define DEFAULT_HEAP (8ull << 20)
#define N_MEMORY_LIMITS 3              /* CU_LIMIT_STACK_SIZE, _PRINTF_FIFO_SIZE, _MALLOC_HEAP_SIZE */

static size_t g_value[HAMI_FAKE_GPU_MAX_DEVICES][N_MEMORY_LIMITS];
static int g_set[HAMI_FAKE_GPU_MAX_DEVICES][N_MEMORY_LIMITS];

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static int sm_count(void) { return env_int("HAMI_FAKE_CUDA_SM_COUNT", 40); }
static int threads_per_sm(void) { return env_int("HAMI_FAKE_CUDA_THREADS_PER_SM", 1024); }

static size_t default_of(CUlimit limit) {
    return limit == CU_LIMIT_STACK_SIZE ? DEFAULT_STACK : limit == CU_LIMIT_PRINTF_FIFO_SIZE ? DEFAULT_FIFO : DEFAULT_HEAP;
}

static uint64_t footprint(CUlimit limit, size_t value) {
    return limit == CU_LIMIT_STACK_SIZE ? (uint64_t)value * (uint64_t)sm_count() * (uint64_t)threads_per_sm() : value;
}

static size_t current_value(int dev, CUlimit limit) { return g_set[dev][limit] ? g_value[dev][limit] : default_of(limit); }

EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
    int dev;
    CUresult rc = fake_current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)limit >= N_MEMORY_LIMITS) {
        *pvalue = 0;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fake_mu);
    *pvalue = current_value(dev, limit);
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    int dev;
    CUresult rc = fake_current_dev(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    if ((unsigned)limit >= N_MEMORY_LIMITS) return CUDA_SUCCESS;
    if (limit == CU_LIMIT_STACK_SIZE) value = (value + 15) & ~(size_t)15; /* the driver rounds stacks up */
    pthread_mutex_lock(&fake_mu);
    uint64_t base = footprint(limit, default_of(limit));
    uint64_t was = footprint(limit, current_value(dev, limit)), now = footprint(limit, value);
    uint64_t held = was > base ? was - base : 0, want = now > base ? now - base : 0;
    if (want > held) rc = fake_take(dev, want - held);
    else if (want < held) fake_give(dev, held - want);
    if (rc == CUDA_SUCCESS) {
        g_value[dev][limit] = value;
        g_set[dev][limit] = 1;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = sm_count(); return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *pi = threads_per_sm(); return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}
