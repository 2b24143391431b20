/* Compute limiting: a per-device token bucket whose rate is steered by the
 * measured utilization of the region's processes.
 *
 * The bucket is kept in GCRA form (one "theoretical arrival time" per device,
 * shared by every process of the allocation): a launch may start at
 * max(tat, now - burst) and pushes tat forward by pace_ns.  That is one CAS
 * per launch and no lock.  The launch itself tells us nothing about how long
 * the kernel runs (real launches are asynchronous), so a feedback controller
 * samples the device time the region's processes actually used (from NVML or
 * the fake runtime's state), estimates the device time per launch, and sets
 * pace = cost * 100 / limit, corrected by the integral of the error while
 * the workload is held back. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "hami_region.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

#define CTL_PERIOD_NS 50000000ull   /* controller period */
#define MAX_BURST_NS 20000000ull    /* catch-up allowed after an idle spell */

static uint64_t default_cost_ns(void) {
    /* Used until the first measurement, and always when no utilization source
     * exists.  HAMI_COMPUTE_LAUNCH_COST_US lets a deployment tune it. */
    static uint64_t cached;
    uint64_t v = LOAD(cached);
    if (v) return v;
    const char *e = getenv("HAMI_COMPUTE_LAUNCH_COST_US");
    v = (e && *e) ? strtoull(e, NULL, 10) * 1000ull : 0;
    if (!v) v = 500000ull;
    STORE(cached, v);
    return v;
}

void hami_throttle_reset(hami_region *r, int device) {
    if (device < 0 || device >= r->device_count) return;
    hami_region_device *d = &r->shm->dev[device];
    STORE(d->err_ns, 0);
    STORE(d->pace_ns, 0);
    STORE(d->ctl_last_ns, 0);
}

static uint64_t pace_for(uint64_t cost, uint32_t limit, int64_t err, uint64_t period) {
    /* Device time we want in the next period: the share, plus half of the
     * shortfall (or minus half of the excess) accumulated so far. */
    int64_t want = (int64_t)(period * limit / 100) + err / 2;
    int64_t floor_ = (int64_t)(period * limit / 400);
    if (want < floor_) want = floor_;
    return (uint64_t)((double)cost * (double)period / (double)want);
}

static void control(hami_region *r, int device, hami_region_device *d, uint32_t limit, uint64_t now,
                    hami_busy_source_fn source) {
    uint64_t last = LOAD(d->ctl_last_ns);
    uint64_t pace = LOAD(d->pace_ns);
    uint64_t period = pace * 3 > CTL_PERIOD_NS ? pace * 3 : CTL_PERIOD_NS;
    if (last != 0 && now - last < period) return;
    /* One process per period runs the controller: whoever wins this CAS. */
    if (!__atomic_compare_exchange_n(&d->ctl_last_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    uint64_t busy = source ? source(r, device) : UINT64_MAX;
    uint64_t launches = LOAD(d->launches), waits = LOAD(d->waits);
    uint64_t cost = LOAD(d->cost_ns);
    uint64_t last_busy = LOAD(d->ctl_last_busy_ns);
    uint64_t dl = launches - LOAD(d->ctl_last_launches), dw = waits - LOAD(d->ctl_last_waits);
    STORE(d->ctl_last_busy_ns, busy);
    STORE(d->ctl_last_launches, launches);
    STORE(d->ctl_last_waits, waits);
    if (busy == UINT64_MAX || last == 0 || busy < last_busy) {
        /* First sample, no source, or the set of processes changed: no delta to learn from. */
        if (!cost) STORE(d->cost_ns, cost = default_cost_ns());
        if (!pace || busy == UINT64_MAX) STORE(d->pace_ns, pace_for(cost, limit, 0, CTL_PERIOD_NS));
        return;
    }
    uint64_t dt = now - last, db = busy - last_busy;
    if (dl > 0 && db > 0) {
        uint64_t sample = db / dl;
        cost = cost ? (cost * 3 + sample) / 4 : sample;
        STORE(d->cost_ns, cost);
    }
    uint64_t u = db * 10000ull / dt;
    uint64_t prev = LOAD(d->util_at_ns) ? LOAD(d->util_x100) : u;
    STORE(d->util_x100, (prev * 3 + u) / 4);
    STORE(d->util_at_ns, now);
    int64_t err = LOAD(d->err_ns);
    if (dw > 0) {
        /* The workload wanted more than it got: integrate the error so
         * measurement and sleep inaccuracies average out over the window. */
        err += (int64_t)(dt * limit / 100) - (int64_t)db;
        int64_t bound = (int64_t)(CTL_PERIOD_NS * limit / 100) * 4;
        if (err > bound) err = bound;
        if (err < -bound) err = -bound;
    } else {
        err /= 2; /* idle or not saturating: do not bank unused share for a later burst */
    }
    STORE(d->err_ns, err);
    STORE(d->pace_ns, pace_for(cost ? cost : default_cost_ns(), limit, err, CTL_PERIOD_NS));
}

void hami_throttle(hami_region *r, int device, hami_busy_source_fn source) {
    if (device < 0 || device >= r->device_count) return;
    hami_region_device *d = &r->shm->dev[device];
    uint32_t limit = LOAD(d->core_limit);
    if (limit == 0 || limit >= 100) return;
    uint64_t now = hami_now_ns();
    control(r, device, d, limit, now, source);
    uint64_t pace = LOAD(d->pace_ns);
    if (!pace) pace = pace_for(default_cost_ns(), limit, 0, CTL_PERIOD_NS);
    uint64_t burst = pace * 2 < MAX_BURST_NS ? pace * 2 : MAX_BURST_NS;
    uint64_t tat = LOAD(d->tat_ns), base;
    do {
        base = tat > now - burst ? tat : now - burst;
    } while (!__atomic_compare_exchange_n(&d->tat_ns, &tat, base + pace, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    __atomic_fetch_add(&d->launches, 1, __ATOMIC_ACQ_REL);
    if (base > now) {
        __atomic_fetch_add(&d->waits, 1, __ATOMIC_ACQ_REL);
        struct timespec ts = {(time_t)(base / 1000000000ull), (long)(base % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
}
