/* The Example Accelerator's limiter shim, libhami_example.so.
 *
 * The allocation's environment preloads it (LD_PRELOAD) into the workload.  It wraps the runtime's
 * memory calls and accounts them in the allocation's shared region ($HAMI_REGION_PATH), through the
 * region API hami-devices installs (hami_devices.limiter.include_dir() and core_sources()):
 *
 *   exrtMalloc      reserve in the region first, then call the runtime, give the bytes back if it
 *                   fails: processes sharing one allocation can never pass its limit together;
 *   exrtFree        give back what the pointer held;
 *   exrtMemGetInfo  report the limit as the total, as the workload's framework expects.
 *
 * Region device i is the i-th granted device: the runtime's device ordinal (it numbers the visible
 * devices from 0).  The limits themselves are in the region, written by hami-devices. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "exrt.h"
#include "hami_region.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define MAX_TRACKED 4096

static struct {
    exrtError (*malloc_)(void **, size_t);
    exrtError (*free_)(void *);
    exrtError (*mem_get_info)(size_t *, size_t *);
    exrtError (*get_device)(int *);
} real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static hami_region *region; /* NULL: no region named, every call passes through */
static int broken;          /* a region was named but is unusable: refuse rather than mis-account */
static int slot = -1;       /* this process's slot in the region */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *ptr;
    size_t bytes;
    int device;
} tracked[MAX_TRACKED];

static void *runtime_symbol(const char *name) {
    /* The workload loads the runtime itself; find it by its soname, or the path it was named by. */
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn) return fn;
    const char *path = getenv("HAMI_EXAMPLE_RUNTIME");
    void *h = dlopen("libexrt.so", RTLD_LAZY | RTLD_NOLOAD);
    if (!h && path && *path) h = dlopen(path, RTLD_LAZY);
    return h ? dlsym(h, name) : NULL;
}

static void child_after_fork(void) { slot = -1; } /* a new process takes its own slot */

static void init(void) {
    real.malloc_ = (exrtError(*)(void **, size_t))runtime_symbol("exrtMalloc");
    real.free_ = (exrtError(*)(void *))runtime_symbol("exrtFree");
    real.mem_get_info = (exrtError(*)(size_t *, size_t *))runtime_symbol("exrtMemGetInfo");
    real.get_device = (exrtError(*)(int *))runtime_symbol("exrtGetDevice");
    pthread_atfork(NULL, NULL, child_after_fork);
    const char *path = getenv("HAMI_REGION_PATH");
    if (!path || !*path) return;
    char err[256];
    if (hami_region_open(path, &region, err, sizeof err) != HAMI_OK) {
        fprintf(stderr, "[hami-example-limiter] region %s is unusable (%s): allocations will fail\n", path, err);
        region = NULL;
        broken = 1;
    }
}

static int ensure_slot(void) {
    if (slot >= 0) return 1;
    int32_t pid = (int32_t)getpid();
    slot = hami_region_register(region, pid, hami_proc_start_time(pid));
    return slot >= 0;
}

__attribute__((destructor)) static void leave(void) {
    if (region && slot >= 0) hami_region_leave(region, slot);
}

static int current_device(void) {
    int device = 0;
    return real.get_device && real.get_device(&device) == EXRT_SUCCESS ? device : 0;
}

static int track(void *ptr, size_t bytes, int device) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_TRACKED; i++) {
        if (tracked[i].ptr) continue;
        tracked[i].ptr = ptr;
        tracked[i].bytes = bytes;
        tracked[i].device = device;
        pthread_mutex_unlock(&lock);
        return 1;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

static int untrack(void *ptr, size_t *bytes, int *device) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_TRACKED; i++) {
        if (!ptr || tracked[i].ptr != ptr) continue;
        *bytes = tracked[i].bytes;
        *device = tracked[i].device;
        tracked[i].ptr = NULL;
        pthread_mutex_unlock(&lock);
        return 1;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

SHIM_EXPORT exrtError exrtMalloc(void **ptr, size_t bytes) {
    pthread_once(&once, init);
    if (!real.malloc_) return EXRT_ERROR_NOT_INITIALIZED;
    if (broken) return EXRT_ERROR_OUT_OF_MEMORY;
    if (!region) return real.malloc_(ptr, bytes);
    if (!ensure_slot()) return EXRT_ERROR_OUT_OF_MEMORY;
    int device = current_device();
    int reserved = hami_region_reserve(region, slot, device, bytes);
    if (reserved == HAMI_E_OOM) hami_region_count_refusal(region, device); /* the exporter and events show it */
    if (reserved != HAMI_OK) return EXRT_ERROR_OUT_OF_MEMORY;
    exrtError rc = real.malloc_(ptr, bytes);
    if (rc != EXRT_SUCCESS) {
        hami_region_release(region, slot, device, bytes);
        return rc;
    }
    if (!track(*ptr, bytes, device)) { /* cannot account its free later: undo */
        real.free_(*ptr);
        hami_region_release(region, slot, device, bytes);
        return EXRT_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

SHIM_EXPORT exrtError exrtFree(void *ptr) {
    pthread_once(&once, init);
    if (!real.free_) return EXRT_ERROR_NOT_INITIALIZED;
    size_t bytes;
    int device;
    int known = region && untrack(ptr, &bytes, &device);
    exrtError rc = real.free_(ptr);
    if (known) {
        if (rc == EXRT_SUCCESS)
            hami_region_release(region, slot, device, bytes);
        else
            track(ptr, bytes, device);
    }
    return rc;
}

SHIM_EXPORT exrtError exrtMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    pthread_once(&once, init);
    if (!real.mem_get_info) return EXRT_ERROR_NOT_INITIALIZED;
    exrtError rc = real.mem_get_info(free_bytes, total_bytes);
    hami_device_info info;
    if (rc != EXRT_SUCCESS || !region || hami_region_device_info(region, current_device(), &info) != HAMI_OK ||
        !info.memory_limit)
        return rc;
    size_t limit = (size_t)info.memory_limit, used = (size_t)info.memory_used;
    size_t left = used >= limit ? 0 : limit - used;
    if (*total_bytes > limit) *total_bytes = limit;
    if (*free_bytes > left) *free_bytes = left;
    return rc;
}
