/* Memory accounting: process slots, reserve/release, dead-process reclaim. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "hami_region.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

int hami_region_device_count(const hami_region *r) { return r->device_count; }

static uint64_t minus(uint64_t a, uint64_t b) { return a >= b ? a - b : 0; }

static int holds(const hami_region_shared *e, int slot) { return (e->holders[slot / 64] >> (slot % 64)) & 1; }

static void drop_holder_locked(hami_region *r, int entry, int slot) {
    hami_region_shared *e = &r->shm->shared[entry];
    if (e->payer < 0 || !holds(e, slot)) return;
    e->holders[slot / 64] &= ~(1ull << (slot % 64));
    if (e->payer != slot) return;
    int next = -1;
    for (int s = 0; s < HAMI_REGION_MAX_PROCS && next < 0; s++)
        if (holds(e, s) && r->shm->proc[s].pid != 0) next = s;
    hami_region_proc *from = &r->shm->proc[slot];
    uint64_t b = e->size <= from->used[e->device] ? e->size : from->used[e->device];
    from->used[e->device] -= b;
    if (next >= 0) { /* the memory lives on in another holder: so does its charge */
        r->shm->proc[next].used[e->device] += b;
        e->payer = next;
        return;
    }
    hami_region_device *d = &r->shm->dev[e->device];
    STORE(d->memory_used, minus(LOAD(d->memory_used), b));
    memset(e, 0, sizeof *e);
    e->payer = -1;
}

static void free_slot_locked(hami_region *r, hami_region_proc *p) {
    int self = (int)(p - r->shm->proc);
    for (int i = 0; i < HAMI_REGION_MAX_SHARED; i++) drop_holder_locked(r, i, self);
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) {
        uint64_t b = p->used[d], s = p->spilled[d];
        hami_region_device *dev = &r->shm->dev[d];
        if (b) STORE(dev->memory_used, minus(LOAD(dev->memory_used), b));
        if (s) STORE(dev->spill_used, minus(LOAD(dev->spill_used), s));
        p->used[d] = 0;
        p->spilled[d] = 0;
    }
    int slot = (int)(p - r->shm->proc);
    if (slot == r->self_slot) {
        hami_slot_lock_drop(r->fd, slot);
        r->self_slot = -1;
    }
    p->start_time = 0;
    p->pidns = 0;
    p->host_pid = 0;
    p->flags = 0;
    STORE(p->pid, 0);
}

/* Whether the process of a slot is alive, as seen from this handle.
 *
 * A slot with a liveness lock is alive while its lock is held: valid from any
 * PID namespace.  Once the lock is free the process has closed the region (it
 * died, or exec'd): a process of this handle's own namespace is still waited
 * for until /proc shows it gone, or a zombie whose every thread has finished
 * too.  The lock alone is not enough: a dying process's files are released
 * one after another, the region's possibly before the driver's whose release
 * frees the device memory, and a leader is a zombie while its other threads
 * still tear the process down.  One of another namespace cannot be looked up
 * and is dead once its lock is free.  A slot
 * without a lock (an anonymous region shared across fork, or a filesystem
 * without OFD locks) is judged by /proc, and only within one namespace: from
 * another one a pid names some other process, so the slot is kept.
 * `thorough` = 0 replaces the /proc read by kill(pid, 0), which misses zombies
 * and reused pids but costs one system call. */
static int slot_alive(const hami_region *r, int slot, int thorough) {
    const hami_region_proc *p = &r->shm->proc[slot];
    int32_t pid = LOAD(p->pid);
    if (pid == 0) return 0;
    if (slot == r->self_slot) return 1;
    int same_ns = p->pidns == r->pidns || p->pidns == 0 || r->pidns == 0;
    if ((p->flags & HAMI_PROC_LOCKED) && r->fd >= 0) {
        int held = hami_slot_lock_held(r->fd, slot);
        if (held != 0) return 1; /* held, or cannot tell: never take a live process's memory */
        if (!same_ns) return 0;
        return hami_proc_alive(pid, p->start_time);
    }
    if (!same_ns) return 1;
    if (!thorough) return !(kill(pid, 0) != 0 && errno == ESRCH);
    return hami_proc_alive(pid, p->start_time);
}

/* Thorough: /proc reads for slots without a lock (catches zombies and reused
 * pids).  Quick: kill(pid, 0) for those.  Locked slots cost one fcntl either way. */
static int reclaim_scan_locked(hami_region *r, int thorough) {
    int n = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++) {
        hami_region_proc *p = &r->shm->proc[i];
        if (p->pid == 0) continue;
        int dead = !slot_alive(r, i, thorough);
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
        uint64_t sum = 0, spilled = 0;
        for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++) {
            if (r->shm->proc[i].pid == 0) continue;
            sum += r->shm->proc[i].used[d];
            spilled += r->shm->proc[i].spilled[d];
        }
        STORE(r->shm->dev[d].memory_used, sum);
        STORE(r->shm->dev[d].spill_used, spilled);
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
    hami_pace_reset(r, device);
    return HAMI_OK;
}

/* A slot this identity may take over: the same process registering again
 * (after exec its old image's memory is gone), or a dead holder of its pid.
 * A live process with the same pid number -- another container's pid 1, or a
 * start time that differs -- is never touched. */
static int stale_self_locked(hami_region *r, int i, const hami_proc_identity *id) {
    hami_region_proc *p = &r->shm->proc[i];
    if (p->pid != id->pid || p->pidns != id->pidns) return 0;
    if (p->start_time == id->start_time && id->start_time != 0) return 1;
    return !slot_alive(r, i, 1);
}

static int register_locked(hami_region *r, const hami_proc_identity *id, int with_lock) {
    /* A process that exited holding memory keeps its slot until it is dead
     * (hami_region_leave); a newcomer gives such slots back, so that it sees
     * the memory they held as free from its first cuMemGetInfo. */
    reclaim_scan_locked(r, 1);
    int slot = -1;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS && slot < 0; i++) {
        if (r->shm->proc[i].pid != 0 && stale_self_locked(r, i, id)) {
            free_slot_locked(r, &r->shm->proc[i]);
            slot = i;
        }
    }
    /* The slot taken over first, then any free one.  A free slot whose lock
     * byte is still held belongs to a process that left it idle and has not
     * closed the file yet: skipped, or its lock would vouch for us. */
    int preferred = slot, locked = 0;
    slot = -1;
    for (int k = -1; k < HAMI_REGION_MAX_PROCS && slot < 0; k++) {
        int i = k < 0 ? preferred : k;
        if (i < 0 || r->shm->proc[i].pid != 0) continue;
        if (with_lock && r->fd >= 0) {
            int rc = hami_slot_lock_take(r->fd, i);
            if (rc == 1) continue;
            locked = rc == 0;
        }
        slot = i;
    }
    if (slot >= 0) {
        hami_region_proc *p = &r->shm->proc[slot];
        memset(p->used, 0, sizeof p->used);
        memset(p->spilled, 0, sizeof p->spilled);
        p->start_time = id->start_time;
        p->pidns = id->pidns;
        p->host_pid = id->host_pid;
        p->flags = locked ? HAMI_PROC_LOCKED : 0;
        STORE(p->pid, id->pid);
        if (with_lock) r->self_slot = slot;
    }
    return slot;
}

int hami_region_register_self(hami_region *r) {
    hami_proc_identity id;
    (void)hami_proc_self(&id); /* start time 0 when /proc is unreadable: then only a lock can vouch */
    if (hami_region_lock(r) != HAMI_OK) return -HAMI_E_LOCK;
    if (r->self_slot >= 0) { /* already registered through this handle */
        int slot = r->self_slot;
        hami_region_unlock(r);
        return slot;
    }
    int slot = register_locked(r, &id, 1);
    hami_region_unlock(r);
    return slot >= 0 ? slot : -HAMI_E_NOSLOT;
}

int hami_region_register(hami_region *r, int32_t pid, uint64_t start_time) {
    hami_proc_identity id = {.pid = pid, .host_pid = pid, .start_time = start_time, .pidns = hami_proc_pidns()};
    if (hami_region_lock(r) != HAMI_OK) return -HAMI_E_LOCK;
    int slot = register_locked(r, &id, 0);
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

void hami_region_count_refusal(hami_region *r, int device) {
    if (device < 0 || device >= r->device_count) return;
    __atomic_fetch_add(&r->shm->dev[device].refused_memory, 1, __ATOMIC_ACQ_REL);
}

void hami_region_release(hami_region *r, int slot, int device, uint64_t bytes) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || device < 0 || device >= r->device_count) return;
    if (hami_region_lock(r) != HAMI_OK) return;
    hami_region_proc *p = &r->shm->proc[slot];
    hami_region_device *d = &r->shm->dev[device];
    uint64_t b = bytes <= p->used[device] ? bytes : p->used[device];
    p->used[device] -= b;
    STORE(d->memory_used, d->memory_used >= b ? d->memory_used - b : 0);
    if (p->spilled[device] > p->used[device]) { /* never more spilled than held */
        STORE(d->spill_used, minus(d->spill_used, p->spilled[device] - p->used[device]));
        p->spilled[device] = p->used[device];
    }
    hami_region_unlock(r);
}

int hami_region_set_virtual(hami_region *r, int device, int enabled, uint64_t spill_limit) {
    if (device < 0 || device >= r->device_count) return HAMI_E_INVALID;
    if (hami_region_lock(r) != HAMI_OK) return HAMI_E_LOCK;
    hami_region_device *d = &r->shm->dev[device];
    STORE(d->spill_limit, spill_limit);
    STORE(d->flags, enabled ? d->flags | HAMI_DEV_VIRTUAL : d->flags & ~HAMI_DEV_VIRTUAL);
    hami_region_unlock(r);
    return HAMI_OK;
}

int hami_region_set_core_policy(hami_region *r, int device, int share) {
    if (device < 0 || device >= r->device_count) return HAMI_E_INVALID;
    if (hami_region_lock(r) != HAMI_OK) return HAMI_E_LOCK;
    hami_region_device *d = &r->shm->dev[device];
    STORE(d->flags, share ? d->flags | HAMI_DEV_SHARE : d->flags & ~HAMI_DEV_SHARE);
    hami_region_unlock(r);
    hami_pace_reset(r, device);
    return HAMI_OK;
}

int hami_region_share(hami_region *r, int slot, int device, uint64_t size, uint64_t key_dev, uint64_t key_ino) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || device < 0 || device >= r->device_count) return -HAMI_E_INVALID;
    if (hami_region_lock(r) != HAMI_OK) return -HAMI_E_LOCK;
    int found = -1;
    for (int i = 0; i < HAMI_REGION_MAX_SHARED && found < 0; i++) {
        hami_region_shared *e = &r->shm->shared[i];
        if (e->payer < 0 && e->size == 0) {
            e->key_dev = key_dev;
            e->key_ino = key_ino;
            e->size = size;
            e->device = device;
            e->holders[slot / 64] |= 1ull << (slot % 64);
            e->payer = slot;
            found = i;
        }
    }
    hami_region_unlock(r);
    return found >= 0 ? found : -HAMI_E_NOSLOT;
}

int hami_region_join(hami_region *r, int slot, uint64_t key_dev, uint64_t key_ino, uint64_t *size, int *device) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS) return -1;
    if (hami_region_lock(r) != HAMI_OK) return -1;
    int found = -1;
    for (int i = 0; i < HAMI_REGION_MAX_SHARED && found < 0; i++) {
        hami_region_shared *e = &r->shm->shared[i];
        if (e->payer >= 0 && e->size && e->key_dev == key_dev && e->key_ino == key_ino) {
            e->holders[slot / 64] |= 1ull << (slot % 64);
            *size = e->size;
            *device = e->device;
            found = i;
        }
    }
    hami_region_unlock(r);
    return found;
}

void hami_region_leave_shared(hami_region *r, int slot, int entry) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || entry < 0 || entry >= HAMI_REGION_MAX_SHARED) return;
    if (hami_region_lock(r) != HAMI_OK) return;
    drop_holder_locked(r, entry, slot);
    hami_region_unlock(r);
}

int hami_region_spill(hami_region *r, int slot, int device, uint64_t bytes) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || device < 0 || device >= r->device_count) return HAMI_E_INVALID;
    if (hami_region_lock(r) != HAMI_OK) return HAMI_E_LOCK;
    hami_region_device *d = &r->shm->dev[device];
    hami_region_proc *p = &r->shm->proc[slot];
    uint64_t used = d->spill_used, cap = d->spill_limit;
    int rc = HAMI_OK;
    if (!(d->flags & HAMI_DEV_VIRTUAL) || p->spilled[device] + bytes > p->used[device]) rc = HAMI_E_INVALID;
    else if ((cap && used + bytes > cap) || used + bytes < used) rc = HAMI_E_OOM;
    if (rc == HAMI_OK) {
        p->spilled[device] += bytes;
        STORE(d->spill_used, used + bytes);
        if (used + bytes > d->spill_peak) STORE(d->spill_peak, used + bytes);
    }
    hami_region_unlock(r);
    return rc;
}

void hami_region_unspill(hami_region *r, int slot, int device, uint64_t bytes) {
    if (slot < 0 || slot >= HAMI_REGION_MAX_PROCS || device < 0 || device >= r->device_count) return;
    if (hami_region_lock(r) != HAMI_OK) return;
    hami_region_proc *p = &r->shm->proc[slot];
    hami_region_device *d = &r->shm->dev[device];
    uint64_t b = bytes <= p->spilled[device] ? bytes : p->spilled[device];
    p->spilled[device] -= b;
    STORE(d->spill_used, minus(d->spill_used, b));
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
    out->flags = LOAD(d->flags);
    out->spill_used = LOAD(d->spill_used);
    out->spill_limit = LOAD(d->spill_limit);
    out->spill_peak = LOAD(d->spill_peak);
    out->refused_memory = LOAD(d->refused_memory);
    out->refused_compute = LOAD(d->waits);
    return HAMI_OK;
}

/* Slot i into *out; 0 when the slot was freed meanwhile. */
static int proc_info_at(hami_region *r, int i, hami_proc_info *out) {
    hami_region_proc *p = &r->shm->proc[i];
    int32_t pid = LOAD(p->pid);
    if (pid == 0) return 0;
    out->pid = pid;
    out->start_time = p->start_time;
    out->pidns = p->pidns;
    out->host_pid = p->host_pid;
    out->locked = (p->flags & HAMI_PROC_LOCKED) != 0;
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++) out->used[d] = LOAD(p->used[d]);
    out->alive = slot_alive(r, i, 1);
    return 1;
}

int hami_region_proc_infos(hami_region *r, hami_proc_info *out, int max) {
    int n = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS && n < max; i++) n += proc_info_at(r, i, &out[n]);
    return n;
}

int hami_regions_usage(hami_region *const *regions, int n, hami_device_info *dev, int *dev_off,
                       hami_proc_info *proc, int max_procs, int *proc_off) {
    int nd = 0, np = 0;
    for (int i = 0; i < n; i++) {
        hami_region *r = regions[i];
        dev_off[i] = nd;
        proc_off[i] = np;
        if (!r) continue;
        for (int d = 0; d < r->device_count; d++) hami_region_device_info(r, d, &dev[nd++]);
        /* One pass over the slot table (it is most of a region's bytes): entries past
         * max_procs are counted, not written, so the caller learns what room to give. */
        for (int s = 0; s < HAMI_REGION_MAX_PROCS; s++) {
            if (LOAD(r->shm->proc[s].pid) == 0) continue;
            if (np < max_procs) np += proc_info_at(r, s, &proc[np]);
            else np++;
        }
    }
    dev_off[n] = nd;
    proc_off[n] = np;
    return np;
}
