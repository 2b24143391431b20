/* TEST BUILDS ONLY (the targets in native/testhooks build fakes/hooks/libhami_*.so with
 * -DHAMI_TEST_HOOKS; the shipped shims carry none of this).
 *
 * Device time of the region's processes, read from the fake runtimes' shared
 * state (tests and the benchmark).  Selected when $HAMI_FAKE_GPU_STATE is set
 * and NVML does not know the device, or by HAMI_UTILIZATION_SOURCE=fake. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "hami_fake_gpu.h"
#include "hami_fake_visible.h"
#include "shim_core.h"

static hami_fake_gpu_state *g_fake;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_order[HAMI_REGION_MAX_DEVICES]; /* region device -> fake-state device */
static int g_count;

/* The shim's device i is the runtime's ordinal i: the same list as the fake runtime's (hami_fake_visible.h). */
static void attach(void) {
    const char *tag = hami_g_shim.tag ? hami_g_shim.tag : "CUDA";
    g_fake = hami_fake_gpu_attach(tag);
    if (!g_fake) return;
    int cuda = strcasecmp(tag, "CUDA") == 0, ascend = strcasecmp(tag, "ASCEND") == 0;
    const char *real = cuda ? "CUDA_VISIBLE_DEVICES" : ascend ? "ASCEND_RT_VISIBLE_DEVICES" : "MLU_VISIBLE_DEVICES";
    g_count = hami_fake_visible(tag, real, g_fake->device_count, cuda ? hami_fake_gpu_uuid : NULL, g_order,
                                HAMI_REGION_MAX_DEVICES);
}

uint64_t hami_busy_from_fake_state(const hami_region *r, int device) {
    pthread_once(&g_once, attach);
    if (!g_fake || device < 0 || device >= g_count) return UINT64_MAX;
    hami_fake_device *fd = &g_fake->devices[g_order[device]];
    hami_fake_play(fd); /* the timeline is played lazily: bring it to the present first */
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

/* The fake device's busy time: while any process has a kernel on it. */
uint64_t hami_device_busy_from_fake_state(const hami_region *r, int device) {
    pthread_once(&g_once, attach);
    if (!g_fake || device < 0 || device >= g_count) return UINT64_MAX;
    hami_fake_device *fd = &g_fake->devices[g_order[device]];
    hami_fake_play(fd);
    return __atomic_load_n(&fd->busy_ns, __ATOMIC_ACQUIRE);
}
