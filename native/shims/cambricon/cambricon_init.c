#define _GNU_SOURCE
#include <pthread.h>

#include "cambricon_shim.h"

__thread int hami_in_cnrt;
hami_ptrmap hami_cn_ptrs;

static int g_ready;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *const MEMORY_VARS[] = {"HAMI_DEVICE_MEMORY_LIMIT", NULL};
static const char *const CORE_VARS[] = {"HAMI_DEVICE_CORE_LIMIT", NULL};
static const char *const REGION_VARS[] = {"HAMI_REGION_PATH", NULL};

static void after_fork_child(void) { hami_ptrmap_after_fork(&hami_cn_ptrs); }

static void init_once(void) {
    hami_shim_config cfg = {"CAMBRICON", MEMORY_VARS, CORE_VARS, REGION_VARS, hami_default_busy_source(0),
                             hami_default_device_busy_source(0)};
    hami_shim_setup(&cfg);
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
}

void hami_cambricon_ensure(void) {
    if (UNLIKELY(!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))) pthread_once(&g_once, init_once);
}
