/* Memory accounting: process slots, reserve/release, dead-process reclaim. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "hami_region.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

int hami_region_device_count(const hami_region *r) { return r->device_count; }

static void free_slot_locked(hami_region *r, hami_region_proc *p) {
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) {
        uint64_t b = p->used[d];
        if (!b) continue;
        hami_region_device *dev = &r->shm->dev[d];
        STORE(dev->memory_used, LOAD(dev->memory_used) >= b ? LOAD(dev->memory_used) - b : 0);
        p->used[d] = 0;
    }
    p->start_time = 0;
    STORE(p->pid, 0);
}

/* Thorough: a slot is dead unless /proc shows its pid running with the same
 * start time (catches zombies and reused pids; one /proc read per slot).
 * Quick: only pids that no longer exist (one kill(pid, 0) per slot). */
static int reclaim_scan_locked(hami_region *r, int thorough) {
    int n = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++) {
        hami_region_proc *p = &r->shm->proc[i];
        if (p->pid == 0) continue;
        int dead = thorough ? !hami_proc_alive(p->pid, p->start_time) : (kill(p->pid, 0) != 0 && errno == ESRCH);
        if (dead) {
            free_slot_locked(r, p);
            n++;
        }
    }
    if (thorough) STORE(r->shm->last_reclaim_ns, hami_now_ns());
    return n;
}

static int reclaim_locked(hami_region *r) { return reclaim_scan_locked(r, 1); }

/* On the refusal path a storm near the limit may refuse thousands of times a
 * second: scan quickly every time, thoroughly at most every 50 ms. */
#define THOROUGH_INTERVAL_NS 50000000ull

static int reclaim_for_refusal_locked(hami_region *r) {
    int thorough = hami_now_ns() - LOAD(r->shm->last_reclaim_ns) >= THOROUGH_INTERVAL_NS;
    return reclaim_scan_locked(r, thorough);
}

/* Called with the lock held after its previous holder died mid-update: drop
 * the dead slots, then rebuild every device total from the live slots, which
 * are consistent because only the dead holder could have been writing. */
void hami_region_repair_locked(hami_region *r) {
    reclaim_locked(r);
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) {
        uint64_t sum = 0;
        for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++)
            if (r->shm->proc[i].pid != 0) sum += r->shm->proc[i].used[d];
        STORE(r->shm->dev[d].memory_used, sum);
    }
    uint32_t mask = 0;
    for (int d = 0; d < r->device_count; d++) {
        uint32_t c = r->shm->dev[d].core_limit;
        if (c > 0 && c < 100) mask |= 1u << d;
    }
    STORE(r->shm->core_limited_mask, mask);
}

int hami_region_reclaim_dead(hami_region *r) {
    if (hami_region_lock(r) != HAMI_OK) return -HAMI_E_LOCK;
    int n = reclaim_locked(r);
    hami_region_unlock(r);
    return n;
}

int hami_region_set_limit(hami_region *r, int device, uint64_t memory_limit, uint32_t core_limit) {
    if (device < 0 || device >= r->device_count || core_limit > 100) return HAMI_E_INVALID;
    if (hami_region_lock(r) != HAMI_OK) return HAMI_E_LOCK;
    hami_region_device *d = &r->shm->dev[device];
    STORE(d->memory_limit, memory_limit);
    STORE(d->core_limit, core_limit);
    uint32_t bit = 1u << device;
    if (core_limit > 0 && core_limit < 100)
        __atomic_fetch_or(&r->shm->core_limited_mask, bit, __ATOMIC_ACQ_REL);
    else
        __atomic_fetch_and(&r->shm->core_limited_mask, ~bit, __ATOMIC_ACQ_REL);
    hami_region_unlock(r);
    hami_throttle_reset(r, device);
    return HAMI_OK;
}

int hami_region_register(hami_region *r, int32_t pid, uint64_t start_time) {
    if (hami_region_lock(r) != HAMI_OK) return -HAMI_E_LOCK;
    /* A process that exited holding memory keeps its slot until it is dead
     * (hami_region_leave); a newcomer gives such slots back, so that it sees
     * the memory they held as free from its first cuMemGetInfo. */
    reclaim_locked(r);
    int slot = -1;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS && slot < 0; i++) {
        hami_region_proc *p = &r->shm->proc[i];
        if (p->pid == pid) {
            /* Same pid: either this process after exec() (same start time; the
             * old image's device memory died with it) or a reused pid. Both
             * start from zero. */
            free_slot_locked(r, p);
            slot = i;
        }
    }
    for (int i = 0; i < HAMI_REGION_MAX_PROCS && slot < 0; i++)
        if (r->shm->proc[i].pid == 0) slot = i;
    if (slot >= 0) {
        hami_region_proc *p = &r->shm->proc[slot];
        memset(p->used, 0, sizeof p->used);
        p->start_time = start_time;
        STORE(p->pid, pid);
    }
    hami_region_unlock(r);
    return slot >= 0 ? slot : -HAMI_E_NOSLOT;
}

void hami_region_unregister(hami_region *r, int slot) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS) return;
    if (hami_region_lock(r) != HAMI_OK) return;
    free_slot_locked(r, &r->shm->proc[slot]);
    hami_region_unlock(r);
}

int hami_region_leave(hami_region *r, int slot) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS) return 0;
    if (hami_region_lock(r) != HAMI_OK) return 0;
    hami_region_proc *p = &r->shm->proc[slot];
    int idle = 1;
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES && idle; d++) idle = p->used[d] == 0;
    if (idle) free_slot_locked(r, p);
    hami_region_unlock(r);
    return idle;
}

int hami_region_reserve(hami_region *r, int slot, int device, uint64_t bytes) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS) return HAMI_E_INVALID;
    if (device < 0 || device >= r->device_count) return HAMI_OK; /* a device the region does not govern */
    if (hami_region_lock(r) != HAMI_OK) return HAMI_E_LOCK;
    hami_region_device *d = &r->shm->dev[device];
    uint64_t limit = d->memory_limit, used = d->memory_used;
    if (limit && (used + bytes > limit || used + bytes < used)) {
        /* Before refusing, give back what dead processes still hold. */
        if (reclaim_for_refusal_locked(r) > 0) used = d->memory_used;
        if (used + bytes > limit || used + bytes < used) {
            hami_region_unlock(r);
            return HAMI_E_OOM;
        }
    }
    /* Slot first, total second: a holder killed between the two leaves a dead
     * slot, and repair rebuilds the total from live slots either way. */
    r->shm->proc[slot].used[device] += bytes;
    STORE(d->memory_used, used + bytes);
    if (used + bytes > d->memory_peak) STORE(d->memory_peak, used + bytes);
    hami_region_unlock(r);
    return HAMI_OK;
}

void hami_region_release(hami_region *r, int slot, int device, uint64_t bytes) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || device < 0 || device >= r->device_count) return;
    if (hami_region_lock(r) != HAMI_OK) return;
    hami_region_proc *p = &r->shm->proc[slot];
    hami_region_device *d = &r->shm->dev[device];
    uint64_t b = bytes <= p->used[device] ? bytes : p->used[device];
    p->used[device] -= b;
    STORE(d->memory_used, d->memory_used >= b ? d->memory_used - b : 0);
    hami_region_unlock(r);
}

int hami_region_device_info(hami_region *r, int device, hami_device_info *out) {
    if (device < 0 || device >= r->device_count) return HAMI_E_INVALID;
    hami_region_device *d = &r->shm->dev[device];
    memset(out, 0, sizeof *out);
    out->memory_limit = LOAD(d->memory_limit);
    out->memory_used = LOAD(d->memory_used);
    out->memory_peak = LOAD(d->memory_peak);
    out->core_limit = LOAD(d->core_limit);
    out->launches = LOAD(d->launches);
    uint64_t at = LOAD(d->util_at_ns), now = hami_now_ns();
    out->util_valid = at != 0 && now - at < 2000000000ull;
    out->util_x100 = LOAD(d->util_x100);
    return HAMI_OK;
}

int hami_region_proc_infos(hami_region *r, hami_proc_info *out, int max) {
    int n = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS && n < max; i++) {
        hami_region_proc *p = &r->shm->proc[i];
        int32_t pid = LOAD(p->pid);
        if (pid == 0) continue;
        out[n].pid = pid;
        out[n].start_time = p->start_time;
        for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) out[n].used[d] = LOAD(p->used[d]);
        out[n].alive = hami_proc_alive(pid, out[n].start_time);
        n++;
    }
    return n;
}
