/* Compute shares paced on device time.
 *
 * A share of L % means the allocation's kernels hold the device at most L % of the time (cap) or at
 * least L % whenever they want it (share).  The unit of the budget is device time, never a launch:
 * each launch is charged the device time it will take, and the charges of all the allocation's
 * processes drain at L % of wall time through one GCRA state in the region (tat_ns: when the
 * charges so far are paid off).  A launch waits only while tat runs more than BURST_NS ahead of
 * now, so launch-bound work that uses less than its share never waits at all.
 *
 * Where the charges come from:
 *   - the CUDA shim times launches with events on the launch's own stream (cuda_pace.c): what a
 *     kernel took on the device, learned per kernel shape, charged at launch, trued up when a new
 *     shape's first timing arrives;
 *   - shims that cannot time launches call hami_pace_launch, which charges the device time per
 *     launch learned from the reading below (cost_ns).
 *
 * The reading: the driver's own account of the allocation's device time (NVML's per-process
 * samples, or the fake driver's state in test builds), integrated by the source.  A kernel timed
 * while another context time-slices with it runs longer than it takes alone, so timed charges
 * overstate the device time an allocation used under contention.  The controller compares, over
 * the spans between new samples, the device time read against the device time charged, and
 * corrects the charges by k (only while the allocation is held back: otherwise the charges bind
 * nothing).  k only ever lowers the charges: a reading that counts more than was charged is a reading
 * of more than this allocation (NVML's device-wide utilization, where a driver has no per-process
 * samples, counts every tenant), and must not starve it.  Without a reading, k stays 1 and the timed
 * charges alone hold the share, erring on the side of less.
 *
 * Share mode also reads the device's busy time (any process): while the allocation wants more than
 * its rate and the device has idle time, the rate rises towards 100 %; while other processes keep
 * the device busy, it falls back to the guarantee.  So a lone tenant runs at full speed, and a
 * second busy tenant gets its own share back within a few sample periods. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "hami_region.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

#define CTL_PERIOD_NS 50000000ull /* how often the controller looks at its readings */
#define BURST_NS 10000000ull      /* how far charges may run ahead of the rate before a launch waits */
#define PPM 1000000ull
#define K_MIN_PPM 100000ull   /* charges are never corrected below a tenth ... */
#define K_MAX_PPM 1000000ull  /* ... or above what was timed: a timing can overstate what a launch held
                                 * the device for (another context ran meanwhile), never understate it */
#define IDLE_NONE 300ull       /* percent x 100 of idle device time that counts as none (sampling) */
#define OTHERS_PRESENT 300ull  /* percent x 100 of device time others use before share mode yields */

void hami_pace_reset(hami_region *r, int device) {
    if (device < 0 || device >= r->device_count) return;
    hami_region_device *d = &r->shm->dev[device];
    STORE(d->rate_x100, 0);
    STORE(d->k_ppm, 0);
    STORE(d->ctl_last_ns, 0);
    STORE(d->ctl_busy_at_ns, 0);
    STORE(d->ctl_dev_at_ns, 0);
    STORE(d->ewma_busy_ns, 0);
    STORE(d->ewma_charged_ns, 0);
}

static uint64_t rate_of(hami_region_device *d, uint32_t limit) {
    uint64_t floor_ = (uint64_t)limit * 100;
    if (!(LOAD(d->flags) & HAMI_DEV_SHARE)) return floor_;
    uint64_t rate = LOAD(d->rate_x100);
    return rate < floor_ ? floor_ : rate > 10000 ? 10000 : rate;
}

/* k from the spans between new samples of the allocation's own device time. */
static void learn_correction(hami_region_device *d, uint64_t busy, uint64_t charged, uint64_t now, int held_back) {
    uint64_t at = LOAD(d->ctl_busy_at_ns), last = LOAD(d->ctl_busy_ns), last_charged = LOAD(d->ctl_charged_ns);
    if (busy == UINT64_MAX) return;
    if (at == 0 || busy < last) { /* the first sample, or the source began a new count */
        STORE(d->ctl_busy_ns, busy);
        STORE(d->ctl_busy_at_ns, now);
        STORE(d->ctl_charged_ns, charged);
        return;
    }
    if (busy == last) return; /* no new sample since the last look */
    uint64_t db = busy - last, dc = charged > last_charged ? charged - last_charged : 0, dt = now - at;
    STORE(d->ctl_busy_ns, busy);
    STORE(d->ctl_busy_at_ns, now);
    STORE(d->ctl_charged_ns, charged);
    if (dt) {
        uint64_t u = db * 10000ull / dt;
        uint64_t prev = LOAD(d->util_at_ns) ? LOAD(d->util_x100) : u;
        STORE(d->util_x100, (prev + u) / 2);
        STORE(d->util_at_ns, now);
    }
    if (!held_back || !dc) return;
    /* Smoothed over a few spans: a driver's samples and the charges never cover quite the same instants. */
    uint64_t eb = LOAD(d->ewma_busy_ns), ec = LOAD(d->ewma_charged_ns);
    eb = eb ? (eb + db) / 2 : db;
    ec = ec ? (ec + dc) / 2 : dc;
    STORE(d->ewma_busy_ns, eb);
    STORE(d->ewma_charged_ns, ec);
    double ratio = (double)eb / (double)ec; /* device time read per device time charged */
    if (ratio > 0.92 && ratio < 1.08) return; /* within what sampling alone explains */
    if (ratio < 0.5) ratio = 0.5;
    if (ratio > 2.0) ratio = 2.0;
    uint64_t k = LOAD(d->k_ppm) ? LOAD(d->k_ppm) : PPM;
    /* k' = k x (1 + ratio) / 2 settles where charges equal the device time read (k = 1 / inflation),
     * half the step at a time. */
    k = (uint64_t)((double)k * (1.0 + ratio) / 2.0);
    if (k < K_MIN_PPM) k = K_MIN_PPM;
    if (k > K_MAX_PPM) k = K_MAX_PPM;
    STORE(d->k_ppm, k);
}

/* Share mode: rise into idle device time while held back, yield back to the guarantee while others
 * keep the device busy. */
static void steer_share_rate(hami_region_device *d, uint32_t limit, uint64_t dev_busy, uint64_t own_util_x100,
                             uint64_t now, int held_back) {
    uint64_t at = LOAD(d->ctl_dev_at_ns), last = LOAD(d->ctl_dev_busy_ns);
    if (dev_busy == UINT64_MAX) return;
    if (at == 0 || dev_busy < last) {
        STORE(d->ctl_dev_busy_ns, dev_busy);
        STORE(d->ctl_dev_at_ns, now);
        return;
    }
    if (dev_busy == last && now - at < 4 * CTL_PERIOD_NS) return; /* no new sample yet */
    uint64_t busy_x100 = (dev_busy - last) * 10000ull / (now - at);
    STORE(d->ctl_dev_busy_ns, dev_busy);
    STORE(d->ctl_dev_at_ns, now);
    uint64_t floor_ = (uint64_t)limit * 100, rate = rate_of(d, limit);
    uint64_t others = busy_x100 > own_util_x100 ? busy_x100 - own_util_x100 : 0;
    uint64_t idle = busy_x100 < 10000 ? 10000 - busy_x100 : 0;
    if (others <= OTHERS_PRESENT) {
        rate = 10000; /* nobody else wants the device: nothing to keep back */
    } else if (held_back && idle > IDLE_NONE) {
        /* Idle time is taken in proportion to the guarantee, so that tenants who all want more
         * split it by their shares. */
        uint64_t up = idle * limit / 100;
        rate += up > 100 ? up : 100;
    } else if (idle <= IDLE_NONE && rate > floor_) {
        /* Others want the device and it has no idle time: give back half of what is above the
         * guarantee per sample, so that a newcomer has its share within a few samples. */
        rate -= (rate - floor_) / 2 + 1;
    }
    STORE(d->rate_x100, rate > 10000 ? 10000 : rate < floor_ ? floor_ : rate);
}

/* Per launch learned from the reading: for shims that cannot time their launches. */
static void learn_cost(hami_region_device *d, uint64_t busy) {
    static __thread uint64_t last_busy = UINT64_MAX, last_launches;
    uint64_t launches = LOAD(d->launches);
    if (busy != UINT64_MAX && last_busy != UINT64_MAX && busy > last_busy && launches > last_launches) {
        uint64_t sample = (busy - last_busy) / (launches - last_launches), cost = LOAD(d->cost_ns);
        STORE(d->cost_ns, cost ? (cost * 3 + sample) / 4 : sample);
    }
    if (busy != last_busy) {
        last_busy = busy;
        last_launches = launches;
    }
}

static void control(hami_region *r, int device, hami_region_device *d, uint32_t limit, uint64_t now,
                    const hami_pace_sources *src, int learns_cost) {
    uint64_t last = LOAD(d->ctl_last_ns);
    if (last != 0 && now - last < CTL_PERIOD_NS) return;
    /* One process per period runs the controller: whoever wins this CAS. */
    if (!__atomic_compare_exchange_n(&d->ctl_last_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    uint64_t waits = LOAD(d->waits);
    int held_back = waits != LOAD(d->ctl_waits);
    STORE(d->ctl_waits, waits);
    uint64_t busy = src && src->own ? src->own(r, device) : UINT64_MAX;
    learn_correction(d, busy, LOAD(d->charged_ns), now, held_back);
    if (learns_cost) learn_cost(d, busy);
    if (LOAD(d->flags) & HAMI_DEV_SHARE) {
        uint64_t dev_busy = src && src->device ? src->device(r, device) : UINT64_MAX;
        uint64_t own = LOAD(d->util_at_ns) && now - LOAD(d->util_at_ns) < 2000000000ull ? LOAD(d->util_x100) : 0;
        steer_share_rate(d, limit, dev_busy, own, now, held_back);
    }
}

static void gate(hami_region *r, int device, const hami_pace_sources *src, int learns_cost) {
    if (device < 0 || device >= r->device_count) return;
    hami_region_device *d = &r->shm->dev[device];
    uint32_t limit = LOAD(d->core_limit);
    if (limit == 0 || limit >= 100) return;
    uint64_t now = hami_now_ns();
    control(r, device, d, limit, now, src, learns_cost);
    __atomic_fetch_add(&d->launches, 1, __ATOMIC_ACQ_REL);
    uint64_t tat = LOAD(d->tat_ns);
    if (tat <= now + BURST_NS) return;
    __atomic_fetch_add(&d->waits, 1, __ATOMIC_ACQ_REL);
    /* Wait off half the burst, not just the excess: one sleep per many short launches, and the
     * rate is exact all the same (each launch then starts half a burst behind tat). */
    uint64_t until = tat - BURST_NS / 2;
    struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void hami_pace_gate(hami_region *r, int device, const hami_pace_sources *src) { gate(r, device, src, 0); }

void hami_pace_charge(hami_region *r, int device, int64_t device_ns) {
    if (device < 0 || device >= r->device_count || device_ns == 0) return;
    hami_region_device *d = &r->shm->dev[device];
    uint32_t limit = LOAD(d->core_limit);
    if (limit == 0 || limit >= 100) return;
    uint64_t k = LOAD(d->k_ppm) ? LOAD(d->k_ppm) : PPM;
    int64_t charge = (int64_t)((double)device_ns * (double)k / (double)PPM);
    if (charge > 0) __atomic_fetch_add(&d->charged_ns, (uint64_t)charge, __ATOMIC_ACQ_REL);
    else __atomic_fetch_sub(&d->charged_ns, (uint64_t)-charge, __ATOMIC_ACQ_REL);
    uint64_t rate = rate_of(d, limit);
    int64_t step = (int64_t)((double)charge * 10000.0 / (double)rate);
    uint64_t now = hami_now_ns(), tat = LOAD(d->tat_ns), next;
    do {
        /* Idle time banks at most one burst: tat never lags now by more. */
        uint64_t base = tat + BURST_NS > now ? tat : now - BURST_NS;
        next = step >= 0 ? base + (uint64_t)step
               : base > (uint64_t)-step + (now - BURST_NS) ? base - (uint64_t)-step : now - BURST_NS;
    } while (!__atomic_compare_exchange_n(&d->tat_ns, &tat, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
}

void hami_pace_launch(hami_region *r, int device, const hami_pace_sources *src) {
    gate(r, device, src, 1);
    if (device < 0 || device >= r->device_count) return;
    uint64_t cost = LOAD(r->shm->dev[device].cost_ns);
    /* Until the first reading, a launch is charged a millisecond: the reading then corrects it. */
    hami_pace_charge(r, device, (int64_t)(cost ? cost : 1000000ull));
}
