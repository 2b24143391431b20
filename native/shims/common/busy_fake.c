/* Device time of the region's processes, read from the fake runtimes' shared
 * state (tests and the benchmark).  Selected only when $HAMI_FAKE_GPU_STATE is set. */
#define _GNU_SOURCE
#include <pthread.h>

#include "hami_fake_gpu.h"
#include "shim_core.h"

static hami_fake_gpu_state *g_fake;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void attach(void) { g_fake = hami_fake_gpu_attach(hami_g_shim.tag ? hami_g_shim.tag : "CUDA"); }

uint64_t hami_busy_from_fake_state(const hami_region *r, int device) {
    pthread_once(&g_once, attach);
    if (!g_fake || device < 0 || (uint32_t)device >= g_fake->device_count) return UINT64_MAX;
    const hami_fake_device *fd = &g_fake->devices[device];
    uint64_t sum = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++) {
        int32_t pid = __atomic_load_n(&r->shm->proc[i].pid, __ATOMIC_ACQUIRE);
        if (pid <= 0) continue;
        for (int j = 0; j < HAMI_FAKE_GPU_MAX_PROCS; j++) {
            if (__atomic_load_n(&fd->procs[j].pid, __ATOMIC_ACQUIRE) == pid) {
                sum += __atomic_load_n(&fd->procs[j].busy_ns, __ATOMIC_ACQUIRE);
                break;
            }
        }
    }
    return sum;
}
