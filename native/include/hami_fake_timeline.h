/*
 * How a fake device spends its time: a model of what the real driver does, played in real time.
 *
 * Included by hami_fake_gpu.h (it uses that header's state and helpers); not for other includers.
 *
 * The model, and the figure behind each constant (all from one NVIDIA H200, driver 580.159.04,
 * CUDA 13.0, PyTorch 2.11, measured by scripts/cuda-limiter-check.sh's first run; see
 * docs/compute-shares.md):
 *   - A launch costs its caller host time and returns; its kernel queues behind the process's earlier
 *     work.  HAMI_FAKE_LAUNCH_NS, default 5,000 ns: a PyTorch `add_` on 16 floats took 6.1-7.1 us
 *     per launch bare, of which PyTorch's own dispatch is about 1-2 us.
 *   - A kernel needs a duration of device time, set by its work: a test names it per thread
 *     (hamiFake*SetKernelNs) or by the kernel's name (fake_cuda.c: "hami_fake_kernel_<us>us").
 *     The cases the benches use: 2 us (the tiny `add_`), 57 us (a 1024x1024 fp32 matmul: 17,550
 *     per second bare) and 2.68 ms (4096x4096: 373 per second bare).
 *   - The streams of one context run in order (a simplification: a real context may overlap
 *     kernels of different streams; the workloads modelled here use one stream).
 *   - Contexts of different processes time-slice: while n > 1 of them have work queued, each
 *     progresses at E / n of the device, E = HAMI_FAKE_SWITCH_EFFICIENCY per mille, default 906:
 *     two processes of 4096x4096 matmuls time-sliced at 170 + 168 per second against 373 alone.
 *     A slice of 1-2 ms is far shorter than the windows anything here measures, so the device is
 *     modelled as shared continuously (processor sharing), less the switches' cost.
 *   - A process may queue at most HAMI_FAKE_QUEUE_DEPTH kernels (default 1,024, the order of a
 *     channel's push buffer) and at most HAMI_FAKE_QUEUE_US of work (default 50 ms, so that a test's
 *     launcher stops within 50 ms of being told); past either, a launch blocks until work drains.
 *   - The device is busy (NVML's device utilization) while any process has work queued; a process's
 *     busy_ns is the device time its kernels actually ran, which NVML's per-process samples report.
 *
 * The timeline is played forward lazily, by whoever looks (a launch, a query, a synchronisation,
 * NVML's sampler), up to the present, under the device's timeline lock: between two events the
 * set of busy processes is fixed, so progress is linear and exact.  Each process's progress keeps
 * a ring of breakpoints, so that an event's completion time -- when done_ns passed the work queued
 * before it -- is known to the nanosecond, as a real event's timestamp is.
 */
#ifndef HAMI_FAKE_TIMELINE_H
#define HAMI_FAKE_TIMELINE_H

#define HAMI_FAKE_PPM 1000000ull

static inline uint64_t hami_fake_env_u64(const char *name, uint64_t fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return end != v ? (uint64_t)x : fallback;
}

/* Configuration, read once per process. */
typedef struct hami_fake_time_config {
    uint64_t launch_ns;
    uint64_t queue_ns;
    uint64_t depth;
    uint64_t efficiency_ppm;
} hami_fake_time_config;

static inline const hami_fake_time_config *hami_fake_time_cfg(void) {
    static hami_fake_time_config cfg;
    static int loaded;
    if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) {
        cfg.launch_ns = hami_fake_env_u64("HAMI_FAKE_LAUNCH_NS", 5000);
        cfg.queue_ns = hami_fake_env_u64("HAMI_FAKE_QUEUE_US", 50000) * 1000ull;
        cfg.depth = hami_fake_env_u64("HAMI_FAKE_QUEUE_DEPTH", 1024);
        if (cfg.depth < 1) cfg.depth = 1;
        uint64_t e = hami_fake_env_u64("HAMI_FAKE_SWITCH_EFFICIENCY", 906);
        cfg.efficiency_ppm = (e < 1 ? 1 : e > 1000 ? 1000 : e) * 1000ull;
        __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
    }
    return &cfg;
}

/* Waits until t the way the driver's default synchronisation does: spinning (yielding the CPU) through
 * short waits, sleeping through long ones. */
static inline void hami_fake_sleep_until(uint64_t t) {
    if (t <= hami_fake_now_ns() + 100000ull) {
        while (hami_fake_now_ns() < t) sched_yield();
        return;
    }
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* The host time a launch costs: spent, not slept, as a driver spends it. */
static inline void hami_fake_spend_host(uint64_t ns) {
    if (!ns) return;
    uint64_t until = hami_fake_now_ns() + ns;
    while (hami_fake_now_ns() < until) {
    }
}

static inline hami_fake_timeline *hami_fake_timeline_of(const hami_fake_device *d) {
    return &hami_fake_mapped->timeline[d - hami_fake_mapped->devices];
}

static inline void hami_fake_time_lock(hami_fake_timeline *tl) {
    int rc = pthread_mutex_lock(&tl->lock);
    if (rc == EOWNERDEAD) {
        /* Killed while playing the timeline: what it wrote is a consistent prefix of a step. */
        pthread_mutex_consistent(&tl->lock);
    } else if (rc != 0) {
        abort();
    }
}

static inline void hami_fake_time_unlock(hami_fake_timeline *tl) { pthread_mutex_unlock(&tl->lock); }

static inline void hami_fake_lane_break(hami_fake_lane *l, uint64_t t, uint64_t rate_ppm) {
    hami_fake_break *b = &l->ring[l->breaks % HAMI_FAKE_BREAKS];
    b->t_ns = t;
    b->done_ns = l->done_ns;
    __atomic_store_n(&l->breaks, l->breaks + 1, __ATOMIC_RELEASE);
    l->rate_ppm = rate_ppm;
}

/* Plays the device forward to now.  Caller holds the timeline lock. */
static inline void hami_fake_play_locked(hami_fake_device *d, hami_fake_timeline *tl, uint64_t now) {
    uint64_t t = d->advanced_ns;
    if (t == 0 || t > now) t = now;
    const hami_fake_time_config *cfg = hami_fake_time_cfg();
    while (t < now) {
        uint64_t n = 0, least = UINT64_MAX;
        for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
            hami_fake_lane *l = &tl->lane[i];
            if (l->done_ns > l->queued_ns) l->done_ns = l->queued_ns;
            uint64_t left = l->queued_ns - l->done_ns;
            if (!left) continue;
            n++;
            if (left < least) least = left;
        }
        if (!n) break;
        uint64_t rate = (n > 1 ? cfg->efficiency_ppm : HAMI_FAKE_PPM) / n; /* device ns per wall ns, ppm */
        /* Wall time until the shortest backlog drains at this rate (rounded up). */
        uint64_t drain = (least * HAMI_FAKE_PPM + rate - 1) / rate;
        uint64_t step = drain < now - t ? drain : now - t;
        uint64_t work = step == drain ? least : step * rate / HAMI_FAKE_PPM;
        for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
            hami_fake_lane *l = &tl->lane[i];
            uint64_t left = l->queued_ns - l->done_ns;
            if (!left) continue;
            if (l->rate_ppm != rate) hami_fake_lane_break(l, t, rate);
            uint64_t w = work < left ? work : left;
            __atomic_store_n(&l->done_ns, l->done_ns + w, __ATOMIC_RELEASE);
            __atomic_fetch_add(&d->procs[i].busy_ns, w, __ATOMIC_ACQ_REL);
            if (l->done_ns == l->queued_ns) hami_fake_lane_break(l, t + step, 0);
        }
        __atomic_fetch_add(&d->busy_ns, step, __ATOMIC_ACQ_REL);
        t += step;
    }
    __atomic_store_n(&d->advanced_ns, now, __ATOMIC_RELEASE);
}

static inline void hami_fake_play(hami_fake_device *d) {
    hami_fake_timeline *tl = hami_fake_timeline_of(d);
    hami_fake_time_lock(tl);
    hami_fake_play_locked(d, tl, hami_fake_now_ns());
    hami_fake_time_unlock(tl);
}

/* A dead process's work goes with it (a driver tears its context down).  Caller holds the book lock. */
static inline void hami_fake_lane_drop(hami_fake_device *d, int slot) {
    hami_fake_timeline *tl = hami_fake_timeline_of(d);
    hami_fake_time_lock(tl);
    hami_fake_play_locked(d, tl, hami_fake_now_ns());
    hami_fake_lane *l = &tl->lane[slot];
    memset(l, 0, sizeof *l);
    hami_fake_time_unlock(tl);
}

/* Work queued by slot's process so far: an event recorded now completes when done_ns reaches it. */
static inline uint64_t hami_fake_lane_mark(hami_fake_device *d, int slot) {
    return __atomic_load_n(&hami_fake_timeline_of(d)->lane[slot].queued_ns, __ATOMIC_ACQUIRE);
}

/* Whether the lane has run all work up to mark (playing the timeline first). */
static inline int hami_fake_lane_reached(hami_fake_device *d, int slot, uint64_t mark) {
    hami_fake_play(d);
    return __atomic_load_n(&hami_fake_timeline_of(d)->lane[slot].done_ns, __ATOMIC_ACQUIRE) >= mark;
}

/* When the lane's progress reached mark (CLOCK_MONOTONIC ns), or 0 while it has not.  From the
 * breakpoints: exact while the ring still holds the segment; older marks get the oldest known time. */
static inline uint64_t hami_fake_lane_time_of(hami_fake_device *d, int slot, uint64_t mark) {
    hami_fake_timeline *tl = hami_fake_timeline_of(d);
    hami_fake_time_lock(tl);
    uint64_t now = hami_fake_now_ns();
    hami_fake_play_locked(d, tl, now);
    hami_fake_lane *l = &tl->lane[slot];
    uint64_t at = 0;
    if (l->done_ns >= mark) {
        /* The first instant done_ns reached mark.  Walk back from the present over the segments
         * [ring[k], ring[k+1]) and the open one [newest, now]: the crossing lies in the newest segment
         * that starts below mark; a segment that starts at or above it means the crossing is older. */
        uint64_t end_t = now, end_done = l->done_ns;
        uint64_t count = l->breaks < HAMI_FAKE_BREAKS ? l->breaks : HAMI_FAKE_BREAKS;
        at = count ? l->ring[(l->breaks - count) % HAMI_FAKE_BREAKS].t_ns : now;
        for (uint64_t k = 0; k < count; k++) {
            const hami_fake_break *b = &l->ring[(l->breaks - 1 - k) % HAMI_FAKE_BREAKS];
            if (b->done_ns < mark) {
                at = b->t_ns + (uint64_t)((double)(end_t - b->t_ns) * (double)(mark - b->done_ns) /
                                          (double)(end_done - b->done_ns));
                break;
            }
            end_t = b->t_ns;
            end_done = b->done_ns;
            at = b->t_ns;
        }
    }
    hami_fake_time_unlock(tl);
    return at;
}

/* Waits until the lane has run everything up to mark. */
static inline void hami_fake_lane_wait(hami_fake_device *d, int slot, uint64_t mark) {
    hami_fake_timeline *tl = hami_fake_timeline_of(d);
    for (;;) {
        hami_fake_time_lock(tl);
        uint64_t now = hami_fake_now_ns();
        hami_fake_play_locked(d, tl, now);
        hami_fake_lane *l = &tl->lane[slot];
        uint64_t done = l->done_ns, rate = l->rate_ppm ? l->rate_ppm : HAMI_FAKE_PPM;
        hami_fake_time_unlock(tl);
        if (done >= mark) return;
        /* Sleep until it would be done at the present rate (others may change it: look again). */
        uint64_t eta = (mark - done) * HAMI_FAKE_PPM / rate;
        hami_fake_sleep_until(now + (eta > 1000 ? eta : 1000));
    }
}

/* Process-local: the end marks of this process's queued kernels per device, to bound the queue depth. */
typedef struct hami_fake_queue {
    uint64_t *marks;
    uint64_t head, count;
} hami_fake_queue;

static hami_fake_queue hami_fake_queues[HAMI_FAKE_GPU_MAX_DEVICES];
static pthread_mutex_t hami_fake_queue_mu = PTHREAD_MUTEX_INITIALIZER;

/* Queues a kernel of duration_ns on the lane of slot: the caller pays the launch's host time, and
 * blocks while its queue is full.  Returns after the kernel is queued. */
static inline void hami_fake_lane_launch(hami_fake_device *d, int slot, uint64_t duration_ns) {
    const hami_fake_time_config *cfg = hami_fake_time_cfg();
    hami_fake_spend_host(cfg->launch_ns);
    int dev = (int)(d - hami_fake_mapped->devices);
    hami_fake_timeline *tl = hami_fake_timeline_of(d);
    hami_fake_lane *l = &tl->lane[slot];
    pthread_mutex_lock(&hami_fake_queue_mu);
    hami_fake_queue *q = &hami_fake_queues[dev];
    if (!q->marks) q->marks = calloc(cfg->depth, sizeof *q->marks);
    for (;;) {
        hami_fake_time_lock(tl);
        uint64_t now = hami_fake_now_ns();
        hami_fake_play_locked(d, tl, now);
        while (q->count && q->marks[(q->head + cfg->depth - q->count) % cfg->depth] <= l->done_ns) q->count--;
        uint64_t backlog = l->queued_ns - l->done_ns;
        uint64_t wait_for = 0;
        if (q->marks && q->count >= cfg->depth) wait_for = q->marks[(q->head + cfg->depth - q->count) % cfg->depth];
        else if (backlog > cfg->queue_ns) wait_for = l->queued_ns - cfg->queue_ns;
        if (!wait_for) {
            __atomic_store_n(&l->queued_ns, l->queued_ns + duration_ns, __ATOMIC_RELEASE);
            if (q->marks && duration_ns) {
                q->marks[q->head] = l->queued_ns;
                q->head = (q->head + 1) % cfg->depth;
                q->count++;
            }
            hami_fake_time_unlock(tl);
            break;
        }
        uint64_t rate = l->rate_ppm ? l->rate_ppm : HAMI_FAKE_PPM;
        uint64_t eta = (wait_for - l->done_ns) * HAMI_FAKE_PPM / rate;
        hami_fake_time_unlock(tl);
        hami_fake_sleep_until(now + (eta > 1000 ? eta : 1000));
    }
    pthread_mutex_unlock(&hami_fake_queue_mu);
}

#endif /* HAMI_FAKE_TIMELINE_H */
