/* Launches timed on the device, for the compute pacer (native/core/pacer.c).
 *
 * A launch is charged the device time it takes.  The shim learns that per kernel shape (function or graph,
 * grid, block, shared memory): it brackets a shape's first launches, and after that one in PROBE_EVERY or
 * one each PROBE_GAP_NS, whichever comes first, with two events recorded on the launch's own stream.  In
 * stream order the first event completes when the work queued before the launch is done and the second
 * when the launch is, so their elapsed time is what the launch held the device for, whatever ran before
 * it.  A probe drains the stream first, so that its first event completes as it is submitted and the
 * kernel once the launch is: the launch's own host time (about 5 us on an H200, as much as a small
 * kernel's run), measured around the call, is taken off the timing.  Launches of a shape whose first
 * timing has not arrived yet are charged when it does (a true-up), so nothing runs uncharged.  The
 * first timing of a shape is awaited once UNKNOWN_MAX launches are queued without it: started together
 * with another context, a process could otherwise queue a whole launch queue of a new shape uncharged
 * (up to 1024 kernels on a real driver) and be trued up for all of it at a first timing that the
 * other context stretched, a debt that held a 30 % share under 15 % for its first second.  The
 * estimate falls fast and rises slowly: a timing stretched by another context time-slicing with this one
 * says less about the kernel than a short one (the pacer's reading corrects what stretched timings still
 * overstate).
 *
 * Probing costs two event records and a drained stream per probe, only on the launches of a compute-
 * limited device, and never on a stream being captured into a graph (the captured launches run later, as
 * the graph's launch, which is charged by its own shape). */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cuda_shim.h"

#define SHAPES 4096          /* open addressing; a full table charges new shapes as unknown, never blocks */
#define PROBES 16
#define PROBE_FIRST 4        /* timings a shape gets before it is probed only now and then */
#define PROBE_EVERY 64
#define PROBE_GAP_NS 50000000ull /* ... and at least this often while it runs */
#define POLL_GAP_NS 200000ull /* probes are looked at no more often than this */
#define UNKNOWN_MAX 8        /* launches of a shape queued before its first timing: the next one waits for it */
#define FIRST_WAIT_NS 200000000ull /* ... for at most this long */

typedef struct shape {
    uint64_t key;      /* 0 = free */
    uint64_t est_ns;
    uint32_t samples;
    uint32_t launches;
    uint32_t unknown;  /* launches charged nothing yet: their true-up comes with the first timing */
    int probing;
    uint64_t probed_ns; /* when its last probe began */
} shape;

typedef struct probe {
    int state;         /* 0 free, 1 start recorded, 2 both recorded */
    int device;
    int shape;
    int has_events;
    int event_device;
    uint64_t submit_ns; /* host time from the first event to the launch's return, when the stream was idle */
    CUevent start, end;
} probe;

static shape g_shapes[SHAPES];
static probe g_probes[PROBES];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_last_poll_ns;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

uint64_t hami_cuda_shape_key(const void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shm) {
    uint64_t h = mix(0x51ed270b27bd5c1dull, (uint64_t)(uintptr_t)fn);
    h = mix(h, ((uint64_t)gx << 32) | gy);
    h = mix(h, ((uint64_t)gz << 32) | bx);
    h = mix(h, ((uint64_t)by << 32) | bz);
    h = mix(h, shm);
    return h ? h : 1;
}

static int find_shape(uint64_t key) {
    for (unsigned i = 0, at = (unsigned)(key % SHAPES); i < 32; i++, at = (at + 1) % SHAPES) {
        if (g_shapes[at].key == key) return (int)at;
        if (g_shapes[at].key == 0) {
            memset(&g_shapes[at], 0, sizeof g_shapes[at]);
            g_shapes[at].key = key;
            return (int)at;
        }
    }
    return -1;
}

/* A finished timing updates its shape; returns the device time to charge now (a true-up). */
static uint64_t learn(shape *s, uint64_t took_ns) {
    uint64_t trueup = 0;
    if (s->samples == 0) {
        s->est_ns = took_ns;
        trueup = took_ns * s->unknown;
        s->unknown = 0;
    } else if (took_ns < s->est_ns) {
        s->est_ns = (s->est_ns + took_ns) / 2;
    } else {
        s->est_ns += (took_ns - s->est_ns) / 16;
    }
    s->samples++;
    return trueup;
}

/* Looks at the recorded probes (caller holds g_mu); adds each true-up to trueup[device]. */
static void poll_probes(uint64_t now, uint64_t *trueup) {
    if (now - g_last_poll_ns < POLL_GAP_NS) return;
    g_last_poll_ns = now;
    for (int i = 0; i < PROBES; i++) {
        probe *p = &g_probes[i];
        if (p->state != 2) continue;
        CUresult q = hami_real.cuEventQuery(p->end);
        if (q == CUDA_ERROR_NOT_READY) continue;
        float ms = 0;
        shape *s = &g_shapes[p->shape];
        if (q == CUDA_SUCCESS && hami_real.cuEventElapsedTime(&ms, p->start, p->end) == CUDA_SUCCESS && ms >= 0) {
            /* On an idle stream the kernel could not start before its launch was submitted: the
             * host time the launch took is not device time. */
            uint64_t took = (uint64_t)((double)ms * 1e6);
            took = took > p->submit_ns ? took - p->submit_ns : took / 8;
            if (p->device >= 0 && p->device < HAMI_REGION_MAX_DEVICES) trueup[p->device] += learn(s, took);
        }
        s->probing = 0;
        p->state = 0;
    }
}

static int free_probe(int device) {
    for (int i = 0; i < PROBES; i++) {
        probe *p = &g_probes[i];
        if (p->state != 0) continue;
        if (p->has_events && p->event_device != device) {
            hami_real.cuEventDestroy_v2(p->start);
            hami_real.cuEventDestroy_v2(p->end);
            p->has_events = 0;
        }
        if (!p->has_events) {
            if (hami_real.cuEventCreate(&p->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return -1;
            if (hami_real.cuEventCreate(&p->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
                hami_real.cuEventDestroy_v2(p->start);
                return -1;
            }
            p->has_events = 1;
            p->event_device = device;
        }
        return i;
    }
    return -1;
}

static int can_time(void) {
    return hami_real.cuEventCreate && hami_real.cuEventRecord && hami_real.cuEventQuery &&
           hami_real.cuEventElapsedTime && hami_real.cuEventDestroy_v2;
}

static int capturing(CUstream s) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!hami_real.cuStreamIsCapturing || hami_real.cuStreamIsCapturing(s, &st) != CUDA_SUCCESS) return 0;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void charge_trueups(const uint64_t *trueup) {
    for (int d = 0; d < HAMI_REGION_MAX_DEVICES; d++)
        if (trueup[d]) hami_shim_pace_charge(d, (int64_t)trueup[d]);
}

void hami_cuda_pace_begin(hami_cuda_pace_ticket *t, uint64_t key, CUstream stream) {
    memset(t, 0, sizeof *t);
    t->shape = -1;
    t->probe = -1;
    t->device = hami_cuda_current_device();
    t->stream = stream;
    if (capturing(stream)) {
        t->skip = 1;
        return;
    }
    hami_shim_pace_gate(t->device);
    uint64_t trueup[HAMI_REGION_MAX_DEVICES] = {0};
    pthread_mutex_lock(&g_mu);
    poll_probes(hami_now_ns(), trueup);
    int i = find_shape(key);
    /* Polled, never waited on: another thread may finish the probe and reuse its events meanwhile.
     * Bounded: a probe whose stream waits on work this thread has yet to launch must not hang it. */
    for (uint64_t until = hami_now_ns() + FIRST_WAIT_NS;
         i >= 0 && g_shapes[i].samples == 0 && g_shapes[i].unknown >= UNKNOWN_MAX && g_shapes[i].probing &&
         hami_now_ns() < until;) {
        pthread_mutex_unlock(&g_mu);
        struct timespec gap = {0, (long)POLL_GAP_NS};
        nanosleep(&gap, NULL);
        pthread_mutex_lock(&g_mu);
        poll_probes(hami_now_ns(), trueup);
    }
    if (i >= 0) {
        shape *s = &g_shapes[i];
        s->launches++;
        t->shape = i;
        uint64_t now = hami_now_ns();
        int due = s->samples < PROBE_FIRST || s->launches % PROBE_EVERY == 0 || now - s->probed_ns > PROBE_GAP_NS;
        if (due && !s->probing && can_time()) {
            int p = free_probe(t->device);
            /* A probe starts on a drained stream, so that its first event completes when it is
             * submitted: the timing is then the launch's submission plus its run, and the launch's
             * own host time is measured here and taken off.  (A pipeline bubble once per PROBE_EVERY
             * launches of a shape.) */
            if (p >= 0 && hami_real.cuStreamSynchronize) hami_real.cuStreamSynchronize(stream);
            if (p >= 0 && hami_real.cuEventRecord(g_probes[p].start, stream) == CUDA_SUCCESS) {
                t->probe_at_ns = hami_now_ns();
                g_probes[p].state = 1;
                s->probed_ns = now;
                g_probes[p].device = t->device;
                g_probes[p].shape = i;
                s->probing = 1;
                t->probe = p;
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    charge_trueups(trueup);
}

void hami_cuda_pace_end(hami_cuda_pace_ticket *t, CUresult rc) {
    if (t->skip) return;
    pthread_mutex_lock(&g_mu);
    shape *s = t->shape >= 0 ? &g_shapes[t->shape] : NULL;
    if (t->probe >= 0) {
        probe *p = &g_probes[t->probe];
        p->submit_ns = hami_now_ns() - t->probe_at_ns;
        if (rc == CUDA_SUCCESS && hami_real.cuEventRecord(p->end, t->stream) == CUDA_SUCCESS) {
            p->state = 2;
        } else {
            p->state = 0;
            if (s) s->probing = 0;
        }
    }
    int charge_now = rc == CUDA_SUCCESS && s && s->samples;
    if (rc == CUDA_SUCCESS && s && !s->samples) s->unknown++;
    uint64_t estimate = s ? s->est_ns : 0;
    pthread_mutex_unlock(&g_mu);
    if (charge_now) hami_shim_pace_charge(t->device, (int64_t)estimate);
}

void hami_cuda_pace_after_fork(void) {
    /* The parent's events are not the child's: forget them (and what was learned with them). */
    memset(g_shapes, 0, sizeof g_shapes);
    memset(g_probes, 0, sizeof g_probes);
    pthread_mutex_init(&g_mu, NULL);
    g_last_poll_ns = 0;
}
