/* Which fake-state devices a fake runtime shows, in which order: the real runtime's own variable
 * (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, MLU_VISIBLE_DEVICES), read the way that runtime
 * reads it, unless a test pins the fake's list with HAMI_FAKE_<VENDOR>_VISIBLE_DEVICES (or
 * HAMI_FAKE_VISIBLE_DEVICES for every vendor).  Header-only, for the fakes and the test hooks.
 *
 * The real variable (CUDA C Programming Guide, "CUDA Environment Variables"): a comma-separated list
 * of device indices, GPU UUIDs (any unique prefix of "GPU-...") or MIG UUIDs; devices are numbered in
 * the list's order, and the first entry that names no device ends the list ("0,2,-1,1" shows 0 and
 * 2).  Unset: every device.  Set but empty: none.  A device named twice also ends it here (a runtime
 * never enumerates one device twice).  The Ascend and Cambricon fakes take indices only, with the
 * same rule for an invalid entry (their vendors document the list, not what an invalid entry does).
 *
 * The pin: "all" (every state device in state order, whatever the real variable says: tests whose
 * allocations name a simulated inventory's UUIDs, which the fake host does not have), or a list of
 * state indices, where an index past the state's devices is skipped. */
#ifndef HAMI_FAKE_VISIBLE_H
#define HAMI_FAKE_VISIBLE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fake_fixture.h"
#include "hami_fake_gpu.h"

/* Fills uuid ("GPU-...") of state device i; NULL for runtimes whose lists take indices only. */
typedef void (*hami_fake_uuid_fn)(int index, char *uuid, size_t len);

/* What hami_fake_gpu_identity looks for while it reads the fixture. */
typedef struct hami_fake_identity_search {
    int want, seen; /* the index sought, the [gpu] sections begun so far */
    char *uuid, *bus_id;
    size_t uuid_len, bus_len;
} hami_fake_identity_search;

/* Sections up to the one sought are read; the next one ends the search. */
static inline void *hami_fake_identity_begin(void *ctx) {
    hami_fake_identity_search *s = ctx;
    if (s->seen > s->want) return NULL;
    s->seen++;
    return s;
}

static inline void hami_fake_identity_set(void *ctx, void *record, const char *key, char *value) {
    hami_fake_identity_search *s = ctx;
    if (s->seen != s->want + 1) return; /* a global key, or a section before the one sought */
    if (!strcmp(key, "uuid")) snprintf(s->uuid, s->uuid_len, "%.95s", value);
    else if (!strcmp(key, "bus_id")) snprintf(s->bus_id, s->bus_len, "%.31s", value);
}

/* Identity of a fake GPU: from the fake NVML's fixture ($HAMI_FAKE_NVML_FIXTURE, "uuid =" and
 * "bus_id =" of the index-th [gpu] section, read as the fake NVML reads it: fake_fixture.h) when
 * one is set, so that the fake NVML and the fake libcuda describe the same GPUs; otherwise the
 * fake NVML's defaults. */
static inline void hami_fake_gpu_identity(int index, char *uuid, size_t uuid_len, char *bus_id, size_t bus_len) {
    snprintf(uuid, uuid_len, "GPU-00000000-0000-0000-0000-%012x", (unsigned)index);
    snprintf(bus_id, bus_len, "00000000:%02X:00.0", 0x10 + (unsigned)index);
    const char *path = getenv("HAMI_FAKE_NVML_FIXTURE");
    if (!path || !*path) return;
    hami_fake_identity_search search = {index, 0, uuid, bus_id, uuid_len, bus_len};
    /* Quiet: the fake NVML reports the fixture's faults once, where this is read at every query. */
    const hami_fixture_reader reader = {.section = "gpu", .globals = 1, .quiet = 1, .begin = hami_fake_identity_begin,
                                        .set = hami_fake_identity_set, .ctx = &search};
    (void)hami_fixture_read(path, &reader);
}

static inline void hami_fake_gpu_uuid(int index, char *uuid, size_t len) {
    char bus[32];
    hami_fake_gpu_identity(index, uuid, len, bus, sizeof bus);
}

/* The state device a UUID entry names, or -1.  "GPU-<prefix>": the one device whose UUID starts so.
 * A MIG device is shown as its parent GPU (the fake state has no MIG slices): "MIG-GPU-<uuid>/<gi>/<ci>"
 * (before driver R470) names the parent; "MIG-<hex>" is the fake NVML's form (make_mig_uuid: the
 * parent's UUID less its last 8 hex digits, then the instance ids). */
static inline int hami_fake_uuid_entry(const char *entry, size_t len, uint32_t count, hami_fake_uuid_fn uuid_of) {
    char want[128];
    if (len >= sizeof want) return -1;
    memcpy(want, entry, len);
    want[len] = '\0';
    int mig = strncasecmp(want, "MIG-", 4) == 0, legacy = mig && strncasecmp(want + 4, "GPU-", 4) == 0;
    if (legacy) {
        char *slash = strchr(want, '/');
        if (!slash) return -1;
        *slash = '\0';
    }
    int found = -1;
    for (uint32_t i = 0; i < count; i++) {
        char uuid[96];
        uuid_of((int)i, uuid, sizeof uuid);
        int match;
        if (!mig || legacy) {
            const char *w = legacy ? want + 4 : want;
            match = strlen(w) > 4 && strncasecmp(uuid, w, strlen(w)) == 0;
        } else {
            size_t n = strlen(uuid);
            const char *body = strncasecmp(uuid, "GPU-", 4) == 0 ? uuid + 4 : uuid;
            size_t keep = n - (size_t)(body - uuid);
            keep = keep >= 8 ? keep - 8 : 0;
            match = keep > 0 && strncasecmp(want + 4, body, keep) == 0;
        }
        if (!match) continue;
        if (found >= 0) return -1; /* not unique */
        found = (int)i;
    }
    return found;
}

static inline int hami_fake_seen(const int *order, int n, int dev) {
    for (int i = 0; i < n; i++)
        if (order[i] == dev) return 1;
    return 0;
}

/* Fills order[] (visible ordinal -> state device) and returns how many are visible. */
static inline int hami_fake_visible(const char *vendor, const char *real_var, uint32_t count,
                                    hami_fake_uuid_fn uuid_of, int *order, int max) {
    int n = 0;
    const char *pin = hami_fake_env2(vendor, "VISIBLE_DEVICES", "HAMI_FAKE_VISIBLE_DEVICES");
    const char *v = pin ? pin : getenv(real_var);
    if (!v || (pin && !strcasecmp(pin, "all"))) {
        for (uint32_t i = 0; i < count && n < max; i++) order[n++] = (int)i;
        return n;
    }
    for (const char *p = v; *p && n < max;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && p[len - 1] == ' ') len--;
        int dev = -1;
        if (len && strspn(p, "0123456789") >= len) {
            unsigned long i = strtoul(p, NULL, 10);
            dev = i < count ? (int)i : -1;
            if (pin && dev < 0) goto next; /* the pin's own rule: an index past the state is skipped */
        } else if (!pin && uuid_of && len > 4) {
            dev = hami_fake_uuid_entry(p, len, count, uuid_of);
        }
        if (dev < 0 || hami_fake_seen(order, n, dev)) break;
        order[n++] = dev;
    next:
        if (!end) break;
        p = end + 1;
    }
    return n;
}

#endif /* HAMI_FAKE_VISIBLE_H */
