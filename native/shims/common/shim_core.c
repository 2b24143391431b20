#define _GNU_SOURCE
#include <strings.h>

#include "shim_core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hami_shim hami_g_shim = {.mode = HAMI_SHIM_PASSTHROUGH, .slot = -1};

static const char *env_for(const char *const *names, int device) {
    /* Per device, the indexed name wins; across families the first listed wins. */
    for (const char *const *n = names; n && *n; n++) {
        char key[128];
        snprintf(key, sizeof key, "%s_%d", *n, device);
        const char *v = getenv(key);
        if (v && *v) return v;
        v = getenv(*n);
        if (v && *v) return v;
    }
    return NULL;
}

static void broken(const char *what, const char *detail) {
    hami_g_shim.mode = HAMI_SHIM_BROKEN;
    hami_g_shim.region = NULL;
    fprintf(stderr,
            "[hami-limiter/%s] FATAL: %s: %s. Device memory allocations will fail so that this "
            "workload does not run with wrong accounting.\n",
            hami_g_shim.tag, what, detail);
}

/* Serialises this process's registration: after fork several threads of the
 * child may make their first allocation at once, and each must not take a
 * slot of its own (bytes reserved through one and released through another
 * would leave one slot high and the other short). */
static pthread_mutex_t g_slot_mu = PTHREAD_MUTEX_INITIALIZER;

static void after_fork_child(void) {
    /* The child shares the region mapping but is a new process: it takes its
     * own slot (and liveness lock) on first allocation.  Only the forking
     * thread exists here, so the mutex is simply made fresh. */
    pthread_mutex_init(&g_slot_mu, NULL);
    __atomic_store_n(&hami_g_shim.slot, -1, __ATOMIC_RELEASE);
    hami_region_after_fork_child(hami_g_shim.region);
}

static int ensure_slot(void) {
    if (__atomic_load_n(&hami_g_shim.slot, __ATOMIC_ACQUIRE) >= 0) return HAMI_OK;
    pthread_mutex_lock(&g_slot_mu);
    int rc = HAMI_OK;
    if (hami_g_shim.slot < 0) {
        int slot = hami_region_register_self(hami_g_shim.region);
        if (slot < 0) rc = -slot;
        else __atomic_store_n(&hami_g_shim.slot, slot, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_slot_mu);
    return rc;
}

__attribute__((destructor)) static void leave(void) {
    /* Exiting.  A process that holds no device memory hands its slot back now.
     * One that still holds some keeps its reservations: the driver frees that
     * memory only when the process is torn down (after every exit handler,
     * this one included), and releasing earlier would let another process of
     * the allocation be admitted while both hold it -- over the limit.  The
     * reclaim scan frees the slot once the process is gone or a zombie. */
    int slot = __atomic_load_n(&hami_g_shim.slot, __ATOMIC_ACQUIRE);
    if (hami_g_shim.mode == HAMI_SHIM_ACTIVE && slot >= 0 && hami_region_leave(hami_g_shim.region, slot))
        __atomic_store_n(&hami_g_shim.slot, -1, __ATOMIC_RELEASE); /* an allocation in a later exit handler registers again */
}

/* Settings only the environment gives, for a region the environment describes (a private one, or the
 * per-user default): virtual device memory (HAMI_VIRTUAL_MEMORY[_i] = 1, with an optional host cap
 * HAMI_VIRTUAL_MEMORY_HOST_LIMIT[_i]), and -- for the per-user region while none of its processes
 * holds memory -- the limits themselves, so that the region follows the current environment. */
static const char *const VIRTUAL_VARS[] = {"HAMI_VIRTUAL_MEMORY", NULL};
static const char *const SPILL_VARS[] = {"HAMI_VIRTUAL_MEMORY_HOST_LIMIT", NULL};

static void apply_env_settings(hami_region *r, const uint64_t *mem, const uint32_t *core, int user) {
    if (user && hami_region_reclaim_dead(r) >= 0) {
        int idle = 1;
        for (int d = 0; d < r->device_count && idle; d++)
            idle = __atomic_load_n(&r->shm->dev[d].memory_used, __ATOMIC_ACQUIRE) == 0;
        for (int d = 0; d < r->device_count && idle; d++) hami_region_set_limit(r, d, mem[d], core[d]);
    }
    for (int d = 0; d < r->device_count; d++) {
        const char *v = env_for(VIRTUAL_VARS, d), *cap = env_for(SPILL_VARS, d);
        uint64_t spill = 0;
        if (cap && hami_parse_bytes(cap, &spill) != 0) spill = 0;
        if (v && strcmp(v, "1") == 0) hami_region_set_virtual(r, d, 1, spill);
    }
}

/* The compute policy, cap or share: HAMI_DEVICE_CORE_POLICY[_i], else HAMi-core's
 * GPU_CORE_UTILIZATION_POLICY (default: share, the limit holds while others compete; force: cap;
 * disable: no compute limit, handled where the limits are read).  Unset: the region's own. */
static const char *const POLICY_VARS[] = {"HAMI_DEVICE_CORE_POLICY", NULL};

static int hami_core_policy_disabled(void) {
    const char *v = getenv("GPU_CORE_UTILIZATION_POLICY");
    return v && strcasecmp(v, "disable") == 0;
}

static void apply_core_policy(hami_region *r) {
    const char *hami_core = getenv("GPU_CORE_UTILIZATION_POLICY");
    for (int d = 0; d < r->device_count; d++) {
        const char *v = env_for(POLICY_VARS, d);
        int share = -1;
        if (v && strcasecmp(v, "share") == 0) share = 1;
        else if (v && strcasecmp(v, "cap") == 0) share = 0;
        else if (v && *v) fprintf(stderr, "[hami-limiter/%s] %s=%s: want cap or share; keeping the region's\n",
                                  hami_g_shim.tag, POLICY_VARS[0], v);
        else if (hami_core && strcasecmp(hami_core, "default") == 0) share = 1;
        else if (hami_core && strcasecmp(hami_core, "force") == 0) share = 0;
        if (share < 0) continue;
        uint32_t flags = __atomic_load_n(&r->shm->dev[d].flags, __ATOMIC_ACQUIRE);
        if (!!(flags & HAMI_DEV_SHARE) != share) hami_region_set_core_policy(r, d, share);
    }
}

void hami_shim_setup(const hami_shim_config *cfg) {
    hami_g_shim.tag = cfg->tag;
    uint64_t mem[HAMI_REGION_MAX_DEVICES] = {0};
    uint32_t core[HAMI_REGION_MAX_DEVICES] = {0};
    int any = 0;
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) {
        const char *m = env_for(cfg->memory_vars, d), *c = env_for(cfg->core_vars, d);
        if (m) {
            if (hami_parse_bytes(m, &mem[d]) != 0) {
                broken("bad memory limit", m);
                return;
            }
            any |= mem[d] != 0;
        }
        if (c) {
            char *end;
            unsigned long v = strtoul(c, &end, 10);
            if (*end || v > 100) {
                broken("bad core limit (want 0..100)", c);
                return;
            }
            core[d] = hami_core_policy_disabled() ? 0 : (uint32_t)v;
            any |= core[d] > 0 && core[d] < 100;
        }
    }
    const char *path = NULL;
    for (const char *const *n = cfg->region_vars; n && *n && !path; n++) {
        const char *v = getenv(*n);
        if (v && *v) path = v;
    }
    char err[512] = "", user_path[4096];
    int rc, user = path && strcmp(path, "user") == 0;
    if (user) {
        if (hami_user_region_path(user_path, sizeof user_path, err, sizeof err) != 0) {
            broken("cannot use the per-user default region", err);
            return;
        }
        path = user_path;
    }
    if (path) {
        /* The SDK normally creates the region with the allocation's limits;
         * if it is absent (plain HAMi-core style setup), the first process
         * creates it from the environment. */
        rc = hami_region_create(path, HAMI_REGION_MAX_DEVICES, mem, core, HAMI_CREATE_OR_OPEN, &hami_g_shim.region,
                                err, sizeof err);
        if (rc != HAMI_OK) {
            char what[600];
            snprintf(what, sizeof what, "cannot use shared region %.560s", path);
            broken(what, err);
            return;
        }
    } else if (any) {
        rc = hami_region_anonymous(HAMI_REGION_MAX_DEVICES, mem, core, &hami_g_shim.region);
        if (rc != HAMI_OK) {
            broken("cannot create a private region", "mmap failed");
            return;
        }
    } else {
        hami_g_shim.mode = HAMI_SHIM_PASSTHROUGH;
        return;
    }
    if (hami_g_shim.region->fd < 0 || user) apply_env_settings(hami_g_shim.region, mem, core, user);
    apply_core_policy(hami_g_shim.region);
    hami_g_shim.busy_source = cfg->busy_source;
    hami_g_shim.pace.own = cfg->busy_source;
    hami_g_shim.pace.device = cfg->device_busy_source;
    rc = ensure_slot();
    if (rc != HAMI_OK) {
        broken("cannot register this process in the region", rc == HAMI_E_NOSLOT ? "all slots taken" : "lock error");
        return;
    }
    pthread_atfork(NULL, NULL, after_fork_child);
    hami_g_shim.mode = HAMI_SHIM_ACTIVE;
    if (cfg->busy_source && __atomic_load_n(&hami_g_shim.region->shm->core_limited_mask, __ATOMIC_ACQUIRE))
        hami_busy_source_prime(cfg->busy_source);
}

int hami_shim_try_reserve(int device, uint64_t bytes) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE) return hami_g_shim.mode == HAMI_SHIM_PASSTHROUGH ? HAMI_OK : HAMI_E_CORRUPT;
    int rc = ensure_slot();
    if (rc != HAMI_OK) return rc;
    return hami_region_reserve(hami_g_shim.region, hami_g_shim.slot, device, bytes);
}

void hami_shim_count_refusal(int device) {
    if (hami_g_shim.mode == HAMI_SHIM_ACTIVE) hami_region_count_refusal(hami_g_shim.region, device);
}

int hami_shim_reserve(int device, uint64_t bytes) {
    int rc = hami_shim_try_reserve(device, bytes);
    if (rc == HAMI_E_OOM) hami_shim_count_refusal(device);
    return rc;
}

void hami_shim_release(int device, uint64_t bytes) {
    if (hami_g_shim.mode == HAMI_SHIM_ACTIVE && hami_g_shim.slot >= 0)
        hami_region_release(hami_g_shim.region, hami_g_shim.slot, device, bytes);
}

int hami_shim_clamp_meminfo(int device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE) return 0;
    hami_region *r = hami_g_shim.region;
    if (device < 0 || device >= r->device_count) return 0;
    hami_region_device *d = &r->shm->dev[device];
    uint64_t limit = __atomic_load_n(&d->memory_limit, __ATOMIC_ACQUIRE);
    if (!limit) return 0;
    uint64_t used = __atomic_load_n(&d->memory_used, __ATOMIC_ACQUIRE);
    uint64_t left = used < limit ? limit - used : 0;
    if (*total_bytes > limit) *total_bytes = limit;
    if (*free_bytes > left) *free_bytes = left;
    return 1;
}

int hami_shim_spill(int device, uint64_t bytes) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE || hami_g_shim.slot < 0) return HAMI_E_INVALID;
    int rc = hami_region_spill(hami_g_shim.region, hami_g_shim.slot, device, bytes);
    if (rc == HAMI_E_OOM) hami_shim_count_refusal(device);
    return rc;
}

void hami_shim_unspill(int device, uint64_t bytes) {
    if (hami_g_shim.mode == HAMI_SHIM_ACTIVE && hami_g_shim.slot >= 0)
        hami_region_unspill(hami_g_shim.region, hami_g_shim.slot, device, bytes);
}

int hami_shim_share(int device, uint64_t size, uint64_t key_dev, uint64_t key_ino) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE || hami_g_shim.slot < 0) return -1;
    return hami_region_share(hami_g_shim.region, hami_g_shim.slot, device, size, key_dev, key_ino);
}

int hami_shim_join(uint64_t key_dev, uint64_t key_ino, uint64_t *size, int *device) {
    if (hami_g_shim.mode != HAMI_SHIM_ACTIVE || ensure_slot() != HAMI_OK) return -1;
    return hami_region_join(hami_g_shim.region, hami_g_shim.slot, key_dev, key_ino, size, device);
}

void hami_shim_leave_shared(int entry) {
    if (hami_g_shim.mode == HAMI_SHIM_ACTIVE && hami_g_shim.slot >= 0)
        hami_region_leave_shared(hami_g_shim.region, hami_g_shim.slot, entry);
}
