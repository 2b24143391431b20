/*
 * A fake libnvidia-ml.so.1 for tests: the real NVML symbols and SONAME, with a
 * device table read from the fixture file named by $HAMI_FAKE_NVML_FIXTURE.
 *
 * Built twice (native/fakes/nvml and native/fakes/nvml-old).  The "old" build
 * (-DHAMI_FAKE_NVML_OLD) leaves out what an old driver lacks: nvmlInitWithFlags,
 * the _v2/_v3 memory, PCI and process queries, NUMA node, architecture and MIG.
 *
 * Fixture format: one "key = value" per line, '#' starts a comment.  Global keys
 * come before the first [gpu] section; each [gpu] section is the next index.
 *
 *   driver_version = 550.54.15
 *   cuda_driver_version = 12040
 *   mig_profile = <nvml index> <id> <name> <compute slices> <memory slices> <instances> <SMs> <MiB> <starts,...>
 *   [gpu]
 *   name = NVIDIA H100 80GB HBM3      uuid = GPU-...          memory_mib = 81559
 *   reserved_mib = 512                used_mib = 1024         bus_id = 00000000:18:00.0
 *   pci_device_id = 0x233010DE        numa = 0                cc = 9.0
 *   arch = 9                          pcie_switch = 1         host_bridge = 0
 *   mig = enabled|disabled            (absent: MIG not supported)
 *   nvlink = <gpu index | switch:BUSID> <links>     (repeatable; active links)
 *   nvlink_down = <gpu index | switch:BUSID> <links> (links present but inactive)
 *   util = <gpu %> <memory %>         temp = 35               power_mw = 70000
 *   proc = <pid> <used MiB>           (repeatable)
 *   gi = <nvml profile index> <start> (an existing GPU instance with one full compute instance)
 *   unsupported = power temp util numa memory_v2 processes procutil   (these return NOT_SUPPORTED;
 *                                     procutil = nvmlDeviceGetProcessUtilization)
 *   lost = 1                          (every query but name/uuid/PCI returns GPU_IS_LOST)
 *   (faults made while the library is loaded, a GPU named by its uuid: native/fakes/common/fake_faults.h)
 *   (monitoring fields -- clocks, PCIe, ECC, retired pages, remapped rows, energy, memory temperature,
 *   codec utilization, XID events, GPM tensor activity -- are keys of fake_nvml_fields.c, listed there)
 *   mig_refuse = <nvml code>          (instance creation returns this code)
 *
 * Without a fixture, $HAMI_FAKE_GPU_STATE naming an existing fake-GPU state file gives one default
 * [gpu] per state device (memory_mib from the state); with neither, nvmlInit fails as without a driver.
 *
 * With $HAMI_FAKE_GPU_STATE naming an existing fake-GPU state file
 * (native/include/hami_fake_gpu.h), used memory, processes and utilization
 * come from it: NVML device i is fake-GPU-state device i.  Utilization is
 * sampled the way a driver samples it, from the state's busy_ns counters:
 * each query of this library takes a snapshot (at most one per
 * SAMPLE_MIN_NS; nvmlInit takes one too; before the first, all counters
 * were zero when the state was created), and a sample is the busy time
 * between two consecutive snapshots over their distance.  The snapshot history
 * is private to the calling process (a driver's sample buffer is not), so two
 * processes see different sample timestamps; each sample is still exact for
 * the interval it covers.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_faults.h"
#include "fake_fixture.h"
#include "fake_nvml.h"
#include "hami_fake_gpu.h"

#ifndef NVML_ERROR_RESET_REQUIRED
#define NVML_ERROR_RESET_REQUIRED 16 /* nvml.h */
#endif

#define MAX_GPUS 16
#define MAX_PROFILES 16
#define MAX_PROCS 16
#define MAX_GI 8
#define MAX_CI 8
#define MAX_LINKS NVML_NVLINK_MAX_LINKS
#define KIND_GPU 0x47505530u
#define KIND_MIG 0x4d494730u

typedef struct {
    unsigned int index, id, compute_slices, memory_slices, instances, sms;
    unsigned long long memory_mib;
    unsigned int starts[8], nstarts;
    char name[48];
} fake_profile;

struct fake_gpu;
struct fake_gi;

typedef struct fake_ci {
    unsigned int kind; /* KIND_MIG: a compute instance doubles as the MIG device handle */
    int used;
    unsigned int id, profile;
    struct fake_gi *gi;
    char uuid[64];
} fake_ci;

typedef struct fake_gi {
    int used;
    unsigned int id;
    const fake_profile *profile;
    unsigned int start;
    struct fake_gpu *gpu;
    fake_ci cis[MAX_CI];
} fake_gi;

typedef struct {
    char remote[32];
    int active;
} fake_link;

typedef struct fake_gpu {
    unsigned int kind;
    unsigned int index;
    char name[96], uuid[96], bus_id[32];
    unsigned long long memory_mib, reserved_mib, used_mib;
    unsigned int pci_device_id;
    int numa, cc_major, cc_minor, arch, pcie_switch, host_bridge;
    int mig; /* -1 unsupported, 0 disabled, 1 enabled */
    unsigned int util_gpu, util_mem, temp, power_mw;
    int lost, mig_refuse;
    int no_power, no_temp, no_util, no_numa, no_memory_v2, no_processes, no_procutil;
    unsigned int nprocs, proc_pid[MAX_PROCS];
    unsigned long long proc_mib[MAX_PROCS];
    unsigned int nlinks;
    fake_link links[MAX_LINKS];
    fake_gi gis[MAX_GI];
} fake_gpu;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;
static int g_loaded;
static fake_gpu g_gpus[MAX_GPUS];
static unsigned int g_ngpus;
static fake_profile g_profiles[MAX_PROFILES];
static unsigned int g_nprofiles;
static char g_driver[80] = "550.54.15";
static int g_cuda_version = 12040;
static unsigned int g_uuid_counter;
static const hami_fake_gpu_state *g_state;

/* ------------------------------------------------------------------ fixture */

/* Bounded copy that always terminates (truncating, like the driver's buffers do). */
static void copy_str(char *dst, size_t size, const char *src) {
    if (size == 0) return;
    size_t n = strnlen(src, size - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

static void add_links(fake_gpu *g, const char *value, int active) {
    char target[48];
    unsigned int count = 0;
    if (sscanf(value, "%47s %u", target, &count) != 2) return;
    for (unsigned int i = 0; i < count && g->nlinks < MAX_LINKS; i++) {
        fake_link *l = &g->links[g->nlinks++];
        copy_str(l->remote, sizeof l->remote, target); /* resolved once all GPUs are read */
        l->active = active;
    }
}

static void parse_profile(const char *value) {
    if (g_nprofiles >= MAX_PROFILES) return;
    fake_profile *p = &g_profiles[g_nprofiles];
    char starts[64];
    memset(p, 0, sizeof *p);
    if (sscanf(value, "%u %u %47s %u %u %u %u %llu %63s", &p->index, &p->id, p->name, &p->compute_slices,
               &p->memory_slices, &p->instances, &p->sms, &p->memory_mib, starts) != 9)
        return;
    for (char *tok = strtok(starts, ","); tok && p->nstarts < 8; tok = strtok(NULL, ","))
        p->starts[p->nstarts++] = (unsigned int)strtoul(tok, NULL, 10);
    g_nprofiles++;
}

static const fake_profile *profile_by_index(unsigned int index) {
    for (unsigned int i = 0; i < g_nprofiles; i++)
        if (g_profiles[i].index == index) return &g_profiles[i];
    return NULL;
}

__attribute__((unused)) static const fake_profile *profile_by_id(unsigned int id) {
    for (unsigned int i = 0; i < g_nprofiles; i++)
        if (g_profiles[i].id == id) return &g_profiles[i];
    return NULL;
}

static void make_mig_uuid(fake_gpu *g, fake_gi *gi, fake_ci *ci) {
    const char *body = strncmp(g->uuid, "GPU-", 4) == 0 ? g->uuid + 4 : g->uuid;
    char base[40];
    copy_str(base, sizeof base, body);
    size_t n = strlen(base);
    if (n >= 8) base[n - 8] = '\0';
    snprintf(ci->uuid, sizeof ci->uuid, "MIG-%s%02x%02x%04x", base, gi->id & 0xff, ci->id & 0xff,
             (++g_uuid_counter) & 0xffff);
}

static fake_gi *new_gi(fake_gpu *g, const fake_profile *p, unsigned int start) {
    for (unsigned int id = 1; id <= MAX_GI; id++) {
        int taken = 0;
        for (int i = 0; i < MAX_GI; i++)
            if (g->gis[i].used && g->gis[i].id == id) taken = 1;
        if (taken) continue;
        for (int i = 0; i < MAX_GI; i++) {
            if (!g->gis[i].used) {
                fake_gi *gi = &g->gis[i];
                memset(gi, 0, sizeof *gi);
                gi->used = 1;
                gi->id = id;
                gi->profile = p;
                gi->start = start;
                gi->gpu = g;
                return gi;
            }
        }
    }
    return NULL;
}

static fake_ci *new_ci(fake_gi *gi, unsigned int profile) {
    for (int i = 0; i < MAX_CI; i++) {
        if (!gi->cis[i].used) {
            fake_ci *ci = &gi->cis[i];
            memset(ci, 0, sizeof *ci);
            ci->kind = KIND_MIG;
            ci->used = 1;
            ci->id = (unsigned int)i;
            ci->profile = profile;
            ci->gi = gi;
            make_mig_uuid(gi->gpu, gi, ci);
            return ci;
        }
    }
    return NULL;
}

static void set_unsupported(fake_gpu *g, char *value) {
    for (char *tok = strtok(value, " ,"); tok; tok = strtok(NULL, " ,")) {
        if (!strcmp(tok, "power")) g->no_power = 1;
        else if (!strcmp(tok, "temp")) g->no_temp = 1;
        else if (!strcmp(tok, "util")) g->no_util = 1;
        else if (!strcmp(tok, "numa")) g->no_numa = 1;
        else if (!strcmp(tok, "memory_v2")) g->no_memory_v2 = 1;
        else if (!strcmp(tok, "processes")) g->no_processes = 1;
        else if (!strcmp(tok, "procutil")) g->no_procutil = 1;
    }
}

static void gpu_defaults(fake_gpu *g, unsigned int index) {
    memset(g, 0, sizeof *g);
    g->kind = KIND_GPU;
    g->index = index;
    copy_str(g->name, sizeof g->name, "NVIDIA Fake GPU");
    snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-%012x", index);
    snprintf(g->bus_id, sizeof g->bus_id, "00000000:%02X:00.0", 0x10 + index);
    g->memory_mib = 16384;
    g->pci_device_id = 0x000010DE;
    g->numa = -1;
    g->cc_major = 8;
    g->arch = 7;
    g->mig = -1;
    g->pcie_switch = (int)index;
    g->temp = 40;
    g->power_mw = 60000;
}

/* No fixture, but a fake-GPU state: NVML shows the state's devices with the default identities (the
 * ones the fake libcuda reports too), so a shim finds its CUDA devices in NVML by UUID. */
static int devices_of_state(void) {
    const char *path = getenv("HAMI_FAKE_GPU_STATE");
    if (!path || !*path) return NVML_ERROR_DRIVER_NOT_LOADED;
    /* The GPUs exist before any process uses them: the state is created here if no fake runtime did yet. */
    hami_fake_gpu_state *state = hami_fake_gpu_attach("CUDA");
    if (!state) return NVML_ERROR_DRIVER_NOT_LOADED;
    g_ngpus = 0;
    g_nprofiles = 0;
    for (unsigned int i = 0; i < state->device_count && i < MAX_GPUS; i++) {
        gpu_defaults(&g_gpus[i], i);
        g_gpus[i].memory_mib = state->devices[i].total_bytes >> 20;
        g_ngpus++;
    }
    munmap(state, sizeof *state);
    return NVML_SUCCESS;
}

/* GI lines are applied after the profiles are known. */
static char g_pending_gi[MAX_GPUS][MAX_GI][32];

static void *begin_gpu(void *ctx) {
    if (g_ngpus >= MAX_GPUS) return NULL;
    fake_gpu *g = &g_gpus[g_ngpus];
    gpu_defaults(g, g_ngpus);
    g_ngpus++;
    return g;
}

static void set_global(const char *key, char *value) {
    if (!strcmp(key, "driver_version")) copy_str(g_driver, sizeof g_driver, value);
    else if (!strcmp(key, "cuda_driver_version")) g_cuda_version = atoi(value);
    else if (!strcmp(key, "mig_profile")) parse_profile(value);
}

static void set_key(void *ctx, void *record, const char *key, char *value) {
    fake_gpu *g = record;
    if (!g) {
        set_global(key, value);
        return;
    }
    if (!strcmp(key, "name")) copy_str(g->name, sizeof g->name, value);
    else if (!strcmp(key, "uuid")) copy_str(g->uuid, sizeof g->uuid, value);
    else if (!strcmp(key, "bus_id")) copy_str(g->bus_id, sizeof g->bus_id, value);
    else if (!strcmp(key, "memory_mib")) g->memory_mib = strtoull(value, NULL, 10);
    else if (!strcmp(key, "reserved_mib")) g->reserved_mib = strtoull(value, NULL, 10);
    else if (!strcmp(key, "used_mib")) g->used_mib = strtoull(value, NULL, 10);
    else if (!strcmp(key, "pci_device_id")) g->pci_device_id = (unsigned int)strtoul(value, NULL, 0);
    else if (!strcmp(key, "numa")) g->numa = atoi(value);
    else if (!strcmp(key, "cc")) sscanf(value, "%d.%d", &g->cc_major, &g->cc_minor);
    else if (!strcmp(key, "arch")) g->arch = atoi(value);
    else if (!strcmp(key, "pcie_switch")) g->pcie_switch = atoi(value);
    else if (!strcmp(key, "host_bridge")) g->host_bridge = atoi(value);
    else if (!strcmp(key, "mig")) g->mig = !strcmp(value, "enabled") ? 1 : !strcmp(value, "disabled") ? 0 : -1;
    else if (!strcmp(key, "nvlink")) add_links(g, value, 1);
    else if (!strcmp(key, "nvlink_down")) add_links(g, value, 0);
    else if (!strcmp(key, "util")) sscanf(value, "%u %u", &g->util_gpu, &g->util_mem);
    else if (!strcmp(key, "temp")) g->temp = (unsigned int)atoi(value);
    else if (!strcmp(key, "power_mw")) g->power_mw = (unsigned int)atoi(value);
    else if (!strcmp(key, "lost")) g->lost = atoi(value);
    else if (!strcmp(key, "mig_refuse")) g->mig_refuse = atoi(value);
    else if (!strcmp(key, "unsupported")) set_unsupported(g, value);
    else if (hami_fake_nvml_field(g->index, key, value)) return;
    else if (!strcmp(key, "proc") && g->nprocs < MAX_PROCS) {
        sscanf(value, "%u %llu", &g->proc_pid[g->nprocs], &g->proc_mib[g->nprocs]);
        g->nprocs++;
    } else if (!strcmp(key, "gi")) {
        for (int i = 0; i < MAX_GI; i++) {
            if (!g_pending_gi[g->index][i][0]) {
                copy_str(g_pending_gi[g->index][i], sizeof g_pending_gi[g->index][i], value);
                break;
            }
        }
    }
}

static int load_fixture(void) {
    const char *path = getenv("HAMI_FAKE_NVML_FIXTURE");
    if (!path || !*path) return devices_of_state();
    g_ngpus = 0;
    g_nprofiles = 0;
    hami_fake_nvml_fields_reset();
    memset(g_pending_gi, 0, sizeof g_pending_gi);
    const hami_fixture_reader reader = {.section = "gpu", .globals = 1, .begin = begin_gpu, .set = set_key};
    if (hami_fixture_read(path, &reader) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    for (unsigned int gi = 0; gi < g_ngpus; gi++) {
        fake_gpu *gpu = &g_gpus[gi];
        for (unsigned int l = 0; l < gpu->nlinks; l++) {
            char *remote = gpu->links[l].remote;
            if (!strncmp(remote, "switch:", 7)) {
                memmove(remote, remote + 7, strlen(remote + 7) + 1);
            } else {
                unsigned int peer = (unsigned int)atoi(remote);
                if (peer < g_ngpus) copy_str(remote, sizeof gpu->links[l].remote, g_gpus[peer].bus_id);
            }
        }
        for (int i = 0; i < MAX_GI && g_pending_gi[gi][i][0]; i++) {
            unsigned int index, start;
            if (sscanf(g_pending_gi[gi][i], "%u %u", &index, &start) != 2) continue;
            const fake_profile *p = profile_by_index(index);
            if (!p) continue;
            fake_gi *inst = new_gi(gpu, p, start);
            if (inst) new_ci(inst, 0);
        }
    }
    return NVML_SUCCESS;
}

static void attach_state(void) {
    const char *path = getenv("HAMI_FAKE_GPU_STATE");
    if (!path || !*path) return;
    /* Writable where it can be: the sampler plays the device's timeline up to the present before
     * it reads the counters (hami_fake_timeline.h), as a driver's counters are always current. */
    int prot = PROT_READ | PROT_WRITE;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        prot = PROT_READ;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(hami_fake_gpu_state)) {
        void *m = mmap(NULL, sizeof(hami_fake_gpu_state), prot, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            const hami_fake_gpu_state *s = m;
            if (s->magic == HAMI_FAKE_GPU_MAGIC && s->version == HAMI_FAKE_GPU_VERSION) {
                if (prot & PROT_WRITE) hami_fake_mapped = (hami_fake_gpu_state *)m;
                __atomic_store_n(&g_state, s, __ATOMIC_RELEASE);
            } else {
                munmap(m, sizeof(hami_fake_gpu_state));
            }
        }
    }
    close(fd);
}

static pthread_mutex_t g_state_lock = PTHREAD_MUTEX_INITIALIZER;

static const hami_fake_device *state_device(const fake_gpu *g) {
    if (!__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) && g_loaded) {
        /* The fake runtime may create the file after nvmlInit: look again. */
        pthread_mutex_lock(&g_state_lock);
        if (!g_state) attach_state();
        pthread_mutex_unlock(&g_state_lock);
    }
    if (!g_state || g->index >= g_state->device_count || g->index >= HAMI_FAKE_GPU_MAX_DEVICES) return NULL;
    return &g_state->devices[g->index];
}

/* ---- utilization sampling (see the top of the file) ---- */

#define SAMPLE_HISTORY 32

/* The driver's sample period: NVML documents utilization "over the past sample period", between
 * 1 s and 1/6 s by product; data-center GPUs sample at 1/6 s.  HAMI_FAKE_NVML_SAMPLE_US overrides. */
static uint64_t sample_period_ns(void) {
    static uint64_t cached;
    if (!cached) {
        const char *v = getenv("HAMI_FAKE_NVML_SAMPLE_US");
        uint64_t us = v && *v ? strtoull(v, NULL, 10) : 166667ull;
        cached = (us ? us : 1) * 1000ull;
    }
    return cached;
}

typedef struct {
    unsigned long long t_us; /* CLOCK_REALTIME, microseconds (NVML's sample timestamps) */
    uint64_t mono_ns;        /* CLOCK_MONOTONIC, the fake state's clock */
    uint64_t dev_busy;
    int32_t pid[HAMI_FAKE_GPU_MAX_PROCS];
    uint64_t busy[HAMI_FAKE_GPU_MAX_PROCS];
} util_snapshot;

typedef struct {
    unsigned int count, head; /* ring: head = next slot to write */
    util_snapshot snap[SAMPLE_HISTORY];
    uint64_t rates_mono_ns, rates_busy; /* previous nvmlDeviceGetUtilizationRates reading */
} util_history;

static util_history g_hist[MAX_GPUS];
static pthread_mutex_t g_hist_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long long realtime_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

static const util_snapshot *snapshot_at(const util_history *h, unsigned int age) {
    /* age 0 = newest */
    return &h->snap[(h->head + SAMPLE_HISTORY - 1 - age) % SAMPLE_HISTORY];
}

/* Adds a snapshot of the device's counters unless the newest is younger than SAMPLE_MIN_NS.  Caller holds g_hist_lock. */
static void take_snapshot(const fake_gpu *g) {
    const hami_fake_device *d = state_device(g);
    util_history *h = &g_hist[g->index];
    if (!d) return;
    uint64_t now = hami_fake_now_ns();
    if (h->count && now - snapshot_at(h, 0)->mono_ns < sample_period_ns()) return;
    if (hami_fake_mapped) {
        hami_fake_play((hami_fake_device *)d);
        now = __atomic_load_n(&d->advanced_ns, __ATOMIC_ACQUIRE);
    }
    if (!h->count && g_state->created_ns < now) {
        /* No history yet: every counter was zero when the state was created. */
        util_snapshot *z = &h->snap[h->head];
        memset(z, 0, sizeof *z);
        z->mono_ns = g_state->created_ns;
        z->t_us = realtime_us() - (now - g_state->created_ns) / 1000ull;
        h->head = (h->head + 1) % SAMPLE_HISTORY;
        h->count = 1;
    }
    util_snapshot *s = &h->snap[h->head];
    s->mono_ns = now;
    s->t_us = realtime_us();
    s->dev_busy = __atomic_load_n(&d->busy_ns, __ATOMIC_ACQUIRE);
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
        s->pid[i] = __atomic_load_n(&d->procs[i].pid, __ATOMIC_ACQUIRE);
        s->busy[i] = __atomic_load_n(&d->procs[i].busy_ns, __ATOMIC_ACQUIRE);
    }
    h->head = (h->head + 1) % SAMPLE_HISTORY;
    if (h->count < SAMPLE_HISTORY) h->count++;
}

static void snapshot_all(void) {
    pthread_mutex_lock(&g_hist_lock);
    for (unsigned int i = 0; i < g_ngpus; i++) take_snapshot(&g_gpus[i]);
    pthread_mutex_unlock(&g_hist_lock);
}

static unsigned int percent(uint64_t part, uint64_t whole) {
    /* Rounded, not truncated: a caller integrating many samples sees no bias. */
    if (!whole) return 0;
    uint64_t p = (part * 100 + whole / 2) / whole;
    return p > 100 ? 100u : (unsigned int)p;
}

/* ------------------------------------------------------------------ handles */

static nvmlReturn_t check_init(void) {
    return g_refcount > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static fake_gpu *as_gpu(nvmlDevice_t device) {
    fake_gpu *g = (fake_gpu *)device;
    if (!g || g->kind != KIND_GPU) return NULL;
    return g;
}

static fake_ci *as_mig(nvmlDevice_t device) {
    fake_ci *ci = (fake_ci *)device;
    if (!ci || ci->kind != KIND_MIG || !ci->used) return NULL;
    return ci;
}

/* What entry point `call` returns about GPU g under an injected fault (fake_faults.h), or SUCCESS.  An
 * identity query (name, uuid, PCI) still answers about a lost or failed GPU, as the driver keeps those. */
static nvmlReturn_t injected(const fake_gpu *g, const char *call, int identity) {
    switch (hami_fake_fault(g->uuid, call)) {
    case HAMI_FAULT_LOST: /* XID 79, "fallen off the bus": NVML answers GPU_IS_LOST */
        return identity ? NVML_SUCCESS : NVML_ERROR_GPU_IS_LOST;
    case HAMI_FAULT_UNHEALTHY: /* an uncorrectable ECC error (XID 48/63): "GPU requires reset" */
        return identity ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    case HAMI_FAULT_ERROR: /* a hung or restarting driver: NVML's catch-all */
        return NVML_ERROR_UNKNOWN;
    default: return NVML_SUCCESS;
    }
}

/* A physical GPU handle that is alive: SUCCESS, or the error entry point `call` returns. */
static nvmlReturn_t live_gpu_at(nvmlDevice_t device, fake_gpu **out, const char *call) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->lost) return NVML_ERROR_GPU_IS_LOST;
    r = injected(g, call, 0);
    if (r) return r;
    *out = g;
    return NVML_SUCCESS;
}
#define live_gpu(device, out) live_gpu_at((device), (out), __func__)

nvmlReturn_t hami_fake_nvml_gpu_at(nvmlDevice_t device, unsigned int *index, unsigned int *power_mw,
                                   const char *call) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu_at(device, &g, call);
    if (r) return r;
    *index = g->index;
    *power_mw = g->no_power ? 0 : g->power_mw;
    return NVML_SUCCESS;
}

nvmlDevice_t hami_fake_nvml_handle(unsigned int index) {
    return index < g_ngpus ? (nvmlDevice_t)&g_gpus[index] : NULL;
}

/* ------------------------------------------------------------------ init */

static nvmlReturn_t do_init(void) {
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (!g_loaded) {
        r = load_fixture();
        if (r == NVML_SUCCESS) {
            pthread_mutex_lock(&g_state_lock);
            attach_state();
            pthread_mutex_unlock(&g_state_lock);
            g_loaded = 1;
        }
    }
    /* The driver has been sampling all along: start this process's history now. */
    if (r == NVML_SUCCESS && g_state) snapshot_all();
    if (r == NVML_SUCCESS) g_refcount++;
    pthread_mutex_unlock(&g_lock);
    return r;
}

API nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
API nvmlReturn_t nvmlInit(void) { return do_init(); }
#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return do_init(); }
#endif

API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = g_refcount > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (g_refcount > 0) g_refcount--;
    pthread_mutex_unlock(&g_lock);
    return r;
}

API const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(g_driver) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_str(version, length, g_driver);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = g_cuda_version;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_ngpus;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!device || index >= g_ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&g_gpus[index];
    return NVML_SUCCESS;
}

/* Lookups by identity (how a CUDA device is matched to its NVML device). */
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_ngpus; i++) {
        if (strcasecmp(g_gpus[i].uuid, uuid) != 0) continue;
        if (g_gpus[i].lost) return NVML_ERROR_GPU_IS_LOST;
        r = injected(&g_gpus[i], __func__, 0);
        if (r) return r;
        *device = (nvmlDevice_t)&g_gpus[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

#ifndef HAMI_FAKE_NVML_OLD
static int parse_bus_id(const char *text, unsigned int v[4]) {
    /* "dddddddd:bb:dd.f", "dddd:bb:dd.f" or "bb:dd.f" (domain 0) */
    v[0] = v[1] = v[2] = v[3] = 0;
    if (sscanf(text, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]) == 4) return 1;
    v[0] = 0;
    return sscanf(text, "%x:%x.%x", &v[1], &v[2], &v[3]) == 3;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    unsigned int want[4], have[4];
    if (!pciBusId || !device || !parse_bus_id(pciBusId, want)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_ngpus; i++) {
        if (!parse_bus_id(g_gpus[i].bus_id, have) || memcmp(want, have, sizeof want) != 0) continue;
        if (g_gpus[i].lost) return NVML_ERROR_GPU_IS_LOST;
        r = injected(&g_gpus[i], __func__, 0);
        if (r) return r;
        *device = (nvmlDevice_t)&g_gpus[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}
#endif

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gpu *g = as_gpu(device);
    if (!g || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = g->index;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ identity */

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!name) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[160];
    fake_ci *ci = as_mig(device);
    fake_gpu *g = ci ? ci->gi->gpu : as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (!ci && (r = injected(g, __func__, 1))) return r;
    if (ci) snprintf(buf, sizeof buf, "%s MIG %s", g->name, ci->gi->profile->name);
    else snprintf(buf, sizeof buf, "%s", g->name);
    if (strlen(buf) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_str(name, length, buf);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!uuid) return NVML_ERROR_INVALID_ARGUMENT;
    fake_ci *ci = as_mig(device);
    fake_gpu *g = as_gpu(device);
    const char *value = ci ? ci->uuid : g ? g->uuid : NULL;
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    if (g && (r = injected(g, __func__, 1))) return r;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_str(uuid, length, value);
    return NVML_SUCCESS;
}

static void fill_pci_common(const fake_gpu *g, unsigned int *domain, unsigned int *bus, unsigned int *dev) {
    unsigned int d = 0, b = 0, v = 0, fn = 0;
    sscanf(g->bus_id, "%x:%x:%x.%x", &d, &b, &v, &fn);
    *domain = d;
    *bus = b;
    *dev = v;
}

__attribute__((unused)) static void fill_pci_v3(const fake_gpu *g, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    fill_pci_common(g, &pci->domain, &pci->bus, &pci->device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain & 0xffff, pci->bus,
             pci->device);
    copy_str(pci->busId, sizeof pci->busId, g->bus_id);
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = 0x16C110DE;
}

static void fill_pci_legacy(const fake_gpu *g, nvmlPciInfoLegacy_t *pci) {
    memset(pci, 0, sizeof *pci);
    fill_pci_common(g, &pci->domain, &pci->bus, &pci->device);
    snprintf(pci->busId, sizeof pci->busId, "%04X:%02X:%02X.0", pci->domain & 0xffff, pci->bus, pci->device);
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = 0x16C110DE;
}

static nvmlReturn_t pci_gpu_at(nvmlDevice_t device, fake_gpu **out, const char *call) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    r = injected(g, call, 1);
    if (r) return r;
    *out = g;
    return NVML_SUCCESS;
}
#define pci_gpu(device, out) pci_gpu_at((device), (out), __func__)

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    fake_gpu *g;
    nvmlReturn_t r = pci_gpu(device, &g);
    if (r) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci_v3(g, pci);
    return NVML_SUCCESS;
}
#endif

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci) {
    fake_gpu *g;
    nvmlReturn_t r = pci_gpu(device, &g);
    if (r) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci_legacy(g, pci);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci) {
    return nvmlDeviceGetPciInfo_v2(device, pci);
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = (unsigned int)g->arch;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!node) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_numa || g->numa < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)g->numa;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ memory */

static unsigned long long gpu_used_bytes(const fake_gpu *g) {
    const hami_fake_device *d = state_device(g);
    if (d) return __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    return g->used_mib << 20;
}

static nvmlReturn_t mig_memory(fake_ci *ci, unsigned long long *total, unsigned long long *used) {
    *total = ci->gi->profile->memory_mib << 20;
    *used = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    fake_ci *ci = as_mig(device);
    if (ci) {
        mig_memory(ci, &memory->total, &memory->used);
        memory->free = memory->total - memory->used;
        return NVML_SUCCESS;
    }
    fake_gpu *g;
    r = live_gpu(device, &g);
    if (r) return r;
    memory->total = g->memory_mib << 20;
    /* v1 counts the driver's reservation as used. */
    memory->used = gpu_used_bytes(g) + (g->reserved_mib << 20);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    fake_ci *ci = as_mig(device);
    if (ci) {
        mig_memory(ci, &memory->total, &memory->used);
        memory->reserved = 0;
        memory->free = memory->total - memory->used;
        return NVML_SUCCESS;
    }
    fake_gpu *g;
    r = live_gpu(device, &g);
    if (r) return r;
    if (g->no_memory_v2) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = g->memory_mib << 20;
    memory->reserved = g->reserved_mib << 20;
    memory->used = gpu_used_bytes(g);
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ readings */

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!util) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_util) return NVML_ERROR_NOT_SUPPORTED;
    util->gpu = g->util_gpu;
    util->memory = g->util_mem;
    const hami_fake_device *d = state_device(g);
    if (d) {
        /* Device-wide, as the driver reports it: the share of the newest sample period during which
         * some process had a kernel on the device. */
        pthread_mutex_lock(&g_hist_lock);
        take_snapshot(g);
        const util_history *h = &g_hist[g->index];
        util->gpu = 0;
        if (h->count > 1) {
            const util_snapshot *cur = snapshot_at(h, 0), *prev = snapshot_at(h, 1);
            util->gpu = percent(cur->dev_busy - prev->dev_busy, cur->mono_ns - prev->mono_ns);
        }
        pthread_mutex_unlock(&g_hist_lock);
    }
    return NVML_SUCCESS;
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                 unsigned int *processSamplesCount,
                                                 unsigned long long lastSeenTimeStamp) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_procutil) return NVML_ERROR_NOT_SUPPORTED;
    const hami_fake_device *d = state_device(g);
    if (!d) return NVML_ERROR_NOT_FOUND; /* no shared state: no process ever ran a kernel */
    pthread_mutex_lock(&g_hist_lock);
    take_snapshot(g);
    const util_history *h = &g_hist[g->index];
    unsigned int n = 0, cap = utilization ? *processSamplesCount : 0;
    /* Oldest interval first; an interval (prev, cur] is a sample period ending at cur->t_us. */
    for (unsigned int age = h->count > 1 ? h->count - 1 : 0; age-- > 0;) {
        const util_snapshot *prev = snapshot_at(h, age + 1), *cur = snapshot_at(h, age);
        if (cur->t_us <= lastSeenTimeStamp) continue;
        uint64_t dt = cur->mono_ns - prev->mono_ns;
        for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
            if (cur->pid[i] <= 0) continue;
            uint64_t before = prev->pid[i] == cur->pid[i] ? prev->busy[i] : 0;
            if (cur->busy[i] <= before) continue; /* idle in this period: no sample, as NVML */
            if (n < cap) {
                nvmlProcessUtilizationSample_t *u = &utilization[n];
                u->pid = (unsigned int)cur->pid[i];
                u->timeStamp = cur->t_us;
                u->smUtil = percent(cur->busy[i] - before, dt);
                u->memUtil = u->encUtil = u->decUtil = 0;
            }
            n++;
        }
    }
    pthread_mutex_unlock(&g_hist_lock);
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    if (!utilization || n > cap) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}
#endif

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_temp) return NVML_ERROR_NOT_SUPPORTED;
    *temp = g->temp;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_power) return NVML_ERROR_NOT_SUPPORTED;
    *power = g->power_mw;
    return NVML_SUCCESS;
}

/* Processes as (pid, bytes) pairs, from the shared state when present.  A process's bytes are all
 * the device memory it holds: its allocations and its contexts (the fake libcuda takes a context's
 * memory into the process's slot when it creates the context), as a driver reports them. */
static unsigned int collect_procs(const fake_gpu *g, unsigned int *pids, unsigned long long *bytes,
                                  unsigned int max) {
    unsigned int n = 0;
    const hami_fake_device *d = state_device(g);
    if (d) {
        for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS && n < max; i++) {
            int32_t pid = __atomic_load_n(&d->procs[i].pid, __ATOMIC_ACQUIRE);
            if (pid <= 0) continue;
            pids[n] = (unsigned int)pid;
            bytes[n] = __atomic_load_n(&d->procs[i].used_bytes, __ATOMIC_ACQUIRE);
            n++;
        }
        return n;
    }
    for (unsigned int i = 0; i < g->nprocs && n < max; i++, n++) {
        pids[n] = g->proc_pid[i];
        bytes[n] = g->proc_mib[i] << 20;
    }
    return n;
}

/* Shared body of the three process queries; `size` is the caller's element size. */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *count, void *infos, int legacy) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->no_processes) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int pids[HAMI_FAKE_GPU_MAX_PROCS];
    unsigned long long bytes[HAMI_FAKE_GPU_MAX_PROCS];
    unsigned int n = collect_procs(g, pids, bytes, HAMI_FAKE_GPU_MAX_PROCS);
    if (*count < n || (n > 0 && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (legacy) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
            p->pid = pids[i];
            p->usedGpuMemory = bytes[i];
        } else {
            nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)infos + i;
            p->pid = pids[i];
            p->usedGpuMemory = bytes[i];
            p->gpuInstanceId = 0xFFFFFFFFu;
            p->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_v1_t *infos) {
    return running_processes(device, count, infos, 1);
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                         nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 0);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                         nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 0);
}
#endif

/* ------------------------------------------------------------------ topology */

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *active) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->nlinks == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    *active = (unsigned int)g->links[link].active;
    return NVML_SUCCESS;
}

static nvmlReturn_t remote_link(nvmlDevice_t device, unsigned int link, fake_gpu *remote_out, fake_gpu **g_out) {
    fake_gpu *g;
    nvmlReturn_t r = live_gpu(device, &g);
    if (r) return r;
    if (g->nlinks == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    memset(remote_out, 0, sizeof *remote_out);
    copy_str(remote_out->bus_id, sizeof remote_out->bus_id, g->links[link].remote);
    remote_out->pci_device_id = 0x22A310DE;
    for (unsigned int i = 0; i < g_ngpus; i++)
        if (!strcmp(g_gpus[i].bus_id, g->links[link].remote)) remote_out->pci_device_id = g_gpus[i].pci_device_id;
    *g_out = g;
    return NVML_SUCCESS;
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    fake_gpu remote, *g;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = remote_link(device, link, &remote, &g);
    if (r) return r;
    fill_pci_v3(&remote, pci);
    return NVML_SUCCESS;
}
#endif

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                  nvmlPciInfoLegacy_t *pci) {
    fake_gpu remote, *g;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = remote_link(device, link, &remote, &g);
    if (r) return r;
    fill_pci_legacy(&remote, pci);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                     unsigned int *level) {
    fake_gpu *a, *b;
    nvmlReturn_t r = live_gpu(device1, &a);
    if (r) return r;
    r = live_gpu(device2, &b);
    if (r) return r;
    if (!level) return NVML_ERROR_INVALID_ARGUMENT;
    if (a == b) *level = NVML_TOPOLOGY_INTERNAL;
    else if (a->pcie_switch == b->pcie_switch) *level = NVML_TOPOLOGY_SINGLE;
    else if (a->host_bridge == b->host_bridge && a->numa == b->numa) *level = NVML_TOPOLOGY_HOSTBRIDGE;
    else if (a->numa == b->numa) *level = NVML_TOPOLOGY_NODE;
    else *level = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ MIG */
#ifndef HAMI_FAKE_NVML_OLD

static nvmlReturn_t mig_gpu(nvmlDevice_t device, fake_gpu **out) {
    nvmlReturn_t r = live_gpu(device, out);
    if (r) return r;
    if ((*out)->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = (unsigned int)g->mig;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = as_mig(device) != NULL;
    return NVML_SUCCESS;
}

static unsigned int max_compute_slices(void) {
    unsigned int m = 0;
    for (unsigned int i = 0; i < g_nprofiles; i++)
        if (g_profiles[i].compute_slices > m) m = g_profiles[i].compute_slices;
    return m;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = max_compute_slices();
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->mig != 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int seen = 0;
    for (int i = 0; i < MAX_GI; i++) {
        if (!g->gis[i].used) continue;
        for (int c = 0; c < MAX_CI; c++) {
            if (!g->gis[i].cis[c].used) continue;
            if (seen++ == index) {
                *mig = (nvmlDevice_t)&g->gis[i].cis[c];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_ci *ci = as_mig(mig);
    if (!ci || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)ci->gi->gpu;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_ci *ci = as_mig(device);
    if (!ci || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = ci->gi->id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_ci *ci = as_mig(device);
    if (!ci || !id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = ci->id;
    return NVML_SUCCESS;
}

static void fill_profile(const fake_profile *p, nvmlGpuInstanceProfileInfo_t *info) {
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->sliceCount = p->compute_slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->compute_slices;
    info->decoderCount = p->compute_slices / 2;
    info->memorySizeMB = p->memory_mib;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                     nvmlGpuInstanceProfileInfo_t *info) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_index(profile);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    fill_profile(p, info);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const fake_profile *p = profile_by_index(profile);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    nvmlGpuInstanceProfileInfo_t v1;
    fill_profile(p, &v1);
    info->id = v1.id;
    info->isP2pSupported = 0;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = 0;
    info->jpegCount = 0;
    info->ofaCount = 0;
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    return NVML_SUCCESS;
}

static int overlaps(const fake_gpu *g, unsigned int start, unsigned int size) {
    for (int i = 0; i < MAX_GI; i++) {
        const fake_gi *gi = &g->gis[i];
        if (!gi->used) continue;
        unsigned int s = gi->start, e = gi->start + gi->profile->memory_slices;
        if (start < e && s < start + size) return 1;
    }
    return 0;
}

static unsigned int used_compute(const fake_gpu *g) {
    unsigned int n = 0;
    for (int i = 0; i < MAX_GI; i++)
        if (g->gis[i].used) n += g->gis[i].profile->compute_slices;
    return n;
}

static unsigned int instances_of(const fake_gpu *g, const fake_profile *p) {
    unsigned int n = 0;
    for (int i = 0; i < MAX_GI; i++)
        if (g->gis[i].used && g->gis[i].profile == p) n++;
    return n;
}

/* Whether a new instance of p fits at start next to the existing ones. */
static int fits_at(const fake_gpu *g, const fake_profile *p, unsigned int start) {
    int valid = 0;
    for (unsigned int i = 0; i < p->nstarts; i++)
        if (p->starts[i] == start) valid = 1;
    return valid && !overlaps(g, start, p->memory_slices) && instances_of(g, p) < p->instances &&
           used_compute(g) + p->compute_slices <= max_compute_slices();
}

API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile_id,
                                                               nvmlGpuInstancePlacement_t *placements,
                                                               unsigned int *count) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_id(profile_id);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    if (!placements) {
        *count = p->nstarts;
        return NVML_SUCCESS;
    }
    if (*count < p->nstarts) {
        *count = p->nstarts;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < p->nstarts; i++) {
        placements[i].start = p->starts[i];
        placements[i].size = p->memory_slices;
    }
    *count = p->nstarts;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id,
                                                           unsigned int *count) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_id(profile_id);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    if (g->mig != 1) return NVML_ERROR_INVALID_ARGUMENT;
    /* Greedy count of further instances, as the driver reports it for the current layout. */
    unsigned int n = 0;
    fake_gpu copy = *g;
    for (;;) {
        int placed = 0;
        for (unsigned int i = 0; i < p->nstarts && !placed; i++) {
            if (fits_at(&copy, p, p->starts[i])) {
                fake_gi *gi = NULL;
                for (int k = 0; k < MAX_GI; k++)
                    if (!copy.gis[k].used) gi = &copy.gis[k];
                if (!gi) break;
                gi->used = 1;
                gi->profile = p;
                gi->start = p->starts[i];
                placed = 1;
                n++;
            }
        }
        if (!placed) break;
    }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                          const nvmlGpuInstancePlacement_t *placement,
                                                          nvmlGpuInstance_t *out) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!placement || !out) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->mig != 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->mig_refuse) return g->mig_refuse;
    const fake_profile *p = profile_by_id(profile_id);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_lock);
    fake_gi *gi = NULL;
    if (placement->size == p->memory_slices && fits_at(g, p, placement->start)) gi = new_gi(g, p, placement->start);
    pthread_mutex_unlock(&g_lock);
    if (!gi) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    *out = (nvmlGpuInstance_t)gi;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *out,
                                           unsigned int *count) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!count || !out) return NVML_ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_id(profile_id);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    for (int i = 0; i < MAX_GI; i++)
        if (g->gis[i].used && g->gis[i].profile == p) out[n++] = (nvmlGpuInstance_t)&g->gis[i];
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *out) {
    fake_gpu *g;
    nvmlReturn_t r = mig_gpu(device, &g);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < MAX_GI; i++) {
        if (g->gis[i].used && g->gis[i].id == id) {
            *out = (nvmlGpuInstance_t)&g->gis[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static fake_gi *as_gi(nvmlGpuInstance_t handle) {
    fake_gi *gi = (fake_gi *)handle;
    for (unsigned int g = 0; g < g_ngpus; g++)
        for (int i = 0; i < MAX_GI; i++)
            if (&g_gpus[g].gis[i] == gi && gi->used) return gi;
    return NULL;
}

API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t handle, nvmlGpuInstanceInfo_t *info) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gi *gi = as_gi(handle);
    if (!gi || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = (nvmlDevice_t)gi->gpu;
    info->id = gi->id;
    info->profileId = gi->profile->id;
    info->placement.start = gi->start;
    info->placement.size = gi->profile->memory_slices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t handle, unsigned int profile,
                                                      nvmlComputeInstance_t *out) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gi *gi = as_gi(handle);
    if (!gi || !out || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (gi->gpu->mig_refuse) return gi->gpu->mig_refuse;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used) return NVML_ERROR_INSUFFICIENT_RESOURCES; /* one full compute instance per GI */
    fake_ci *ci = new_ci(gi, profile);
    if (!ci) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    *out = (nvmlComputeInstance_t)ci;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t handle, unsigned int profile,
                                                    nvmlComputeInstance_t *out, unsigned int *count) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gi *gi = as_gi(handle);
    if (!gi || !out || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used && gi->cis[c].profile == profile) out[n++] = (nvmlComputeInstance_t)&gi->cis[c];
    *count = n;
    return NVML_SUCCESS;
}

static fake_ci *as_ci(nvmlComputeInstance_t handle) {
    fake_ci *ci = (fake_ci *)handle;
    return as_mig((nvmlDevice_t)ci);
}

API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t handle, nvmlComputeInstanceInfo_t *info) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_ci *ci = as_ci(handle);
    if (!ci || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = (nvmlDevice_t)ci->gi->gpu;
    info->gpuInstance = (nvmlGpuInstance_t)ci->gi;
    info->id = ci->id;
    info->profileId = ci->profile;
    info->placement.start = 0;
    info->placement.size = ci->gi->profile->compute_slices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t handle) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_ci *ci = as_ci(handle);
    if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
    if (ci->gi->gpu->mig_refuse) return ci->gi->gpu->mig_refuse;
    pthread_mutex_lock(&g_lock);
    ci->used = 0;
    ci->kind = 0;
    pthread_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t handle) {
    nvmlReturn_t r = check_init();
    if (r) return r;
    fake_gi *gi = as_gi(handle);
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (gi->gpu->mig_refuse) return gi->gpu->mig_refuse;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used) return NVML_ERROR_IN_USE;
    pthread_mutex_lock(&g_lock);
    gi->used = 0;
    pthread_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
}
#endif /* HAMI_FAKE_NVML_OLD */
