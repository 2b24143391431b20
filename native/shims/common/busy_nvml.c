/* Device time of the region's processes from NVML, on real NVIDIA hosts.
 *
 * Per process (preferred): nvmlDeviceGetProcessUtilization returns samples
 * (pid, timeStamp in microseconds, smUtil percent over the sample period).
 * Samples newer than the last one integrated are sorted by timestamp; each
 * distinct timestamp closes a period that began at the previous one (at most
 * MAX_PERIOD_US long), and the region's share of that period is the sum of
 * the smUtil of the region's own pids (capped at 100).  Other allocations on
 * the same GPU are not counted, which is what HAMi-core's device-wide reading
 * gets wrong.
 *
 * Device-wide (fallback, only where the per-process call is NOT_SUPPORTED,
 * e.g. an old driver or a MIG device): nvmlDeviceGetUtilizationRates
 * integrated over time.  It over-counts when several allocations share the GPU.
 *
 * The running count and the newest timestamp seen live in the region
 * (hami_region_device.nvml_*), so every process of the allocation continues
 * one count; the controller that calls this runs in one process at a time.
 *
 * CUDA ordinal -> NVML device: by UUID (cuDeviceGetUuid), else by PCI bus id
 * (cuDeviceGetPCIBusId), else -- only when NVML was asked for explicitly, or
 * no fake state is in use -- by index, assuming NVML index == CUDA ordinal
 * (false when CUDA_VISIBLE_DEVICES reorders or hides GPUs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hami_nvml_api.h"
#include "shim_core.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define MAX_PERIOD_US 1000000ull /* NVML's sample periods are 1/6 s .. 1 s */
#define MAX_SAMPLES 4096

enum { MAP_UNKNOWN = 0, MAP_OK = 1, MAP_NONE = 2 };
enum { MODE_PROCESS = 0, MODE_RATES = 1, MODE_NONE = 2 };

static struct {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*by_pci)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*proc_util)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long);
    nvmlReturn_t (*rates)(nvmlDevice_t, nvmlUtilization_t *);
} nv;

static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int fake_state_named(void);
static int g_loaded;
static int g_fresh; /* set by the load; the first reading after it has no history to go on */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_map[HAMI_REGION_MAX_DEVICES];
static int g_mapped_by_index[HAMI_REGION_MAX_DEVICES];
static nvmlDevice_t g_dev[HAMI_REGION_MAX_DEVICES];
static int g_mode[HAMI_REGION_MAX_DEVICES];
static hami_device_identity_fn g_identity;

void hami_busy_set_identity(hami_device_identity_fn fn) { g_identity = fn; }

static void load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return;
    nv.init = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nv.by_index = (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nv.by_uuid = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByUUID");
    nv.by_pci = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    nv.proc_util = (nvmlReturn_t(*)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *,
                                    unsigned long long))dlsym(h, "nvmlDeviceGetProcessUtilization");
    nv.rates = (nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(h, "nvmlDeviceGetUtilizationRates");
    if (!nv.init || !nv.by_index || (!nv.proc_util && !nv.rates) || nv.init() != NVML_SUCCESS) {
        dlclose(h);
        return;
    }
    __atomic_store_n(&g_fresh, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_loaded, 1, __ATOMIC_RELEASE);
}

int hami_nvml_available(void) {
    pthread_once(&g_load_once, load);
    return g_loaded;
}

/* Resolves a CUDA ordinal to its NVML device once per process.  `by_index_ok`:
 * whether the index assumption may be used when identity lookups fail. */
static int resolve(int device, int by_index_ok) {
    int state = LOAD(g_map[device]);
    if (state != MAP_UNKNOWN) return state == MAP_OK && (by_index_ok || !g_mapped_by_index[device]);
    pthread_mutex_lock(&g_mu);
    if (g_map[device] == MAP_UNKNOWN) {
        char uuid[96] = "", bus[32] = "";
        nvmlDevice_t h = NULL;
        int ok = 0;
        if (g_identity && g_identity(device, uuid, sizeof uuid, bus, sizeof bus) != 0) {
            /* The driver is not ready to say yet: try again on the next reading. */
            pthread_mutex_unlock(&g_mu);
            return 0;
        }
        if (uuid[0] && nv.by_uuid && nv.by_uuid(uuid, &h) == NVML_SUCCESS) ok = 1;
        if (!ok && bus[0] && nv.by_pci && nv.by_pci(bus, &h) == NVML_SUCCESS) ok = 1;
        if (!ok && nv.by_index((unsigned int)device, &h) == NVML_SUCCESS) {
            ok = 1;
            g_mapped_by_index[device] = 1;
        }
        g_dev[device] = h;
        g_mode[device] = nv.proc_util ? MODE_PROCESS : MODE_RATES;
        __atomic_store_n(&g_map[device], ok ? MAP_OK : MAP_NONE, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_mu);
    return g_map[device] == MAP_OK && (by_index_ok || !g_mapped_by_index[device]);
}

static int by_time(const void *a, const void *b) {
    unsigned long long x = ((const nvmlProcessUtilizationSample_t *)a)->timeStamp;
    unsigned long long y = ((const nvmlProcessUtilizationSample_t *)b)->timeStamp;
    return x < y ? -1 : x > y;
}

static int region_pid(const int32_t *pids, int n, unsigned int pid) {
    for (int i = 0; i < n; i++)
        if ((unsigned int)pids[i] == pid) return 1;
    return 0;
}

/* Per-process reading.  Returns the new running count, or UINT64_MAX when
 * unknown; sets *unsupported when the driver has no per-process samples. */
static uint64_t per_process(const hami_region *r, int device, int *unsupported) {
    hami_region_device *d = &r->shm->dev[device];
    unsigned long long seen = LOAD(d->nvml_seen_us);
    unsigned int count = 0;
    nvmlReturn_t rc = nv.proc_util(g_dev[device], NULL, &count, seen);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        *unsupported = 1;
        return UINT64_MAX;
    }
    if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0))
        return seen ? LOAD(d->nvml_busy_ns) : UINT64_MAX; /* nothing ran since the last sample */
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS) return UINT64_MAX;
    nvmlProcessUtilizationSample_t *s = NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        count += 16; /* room for samples that arrive between the two calls */
        if (count > MAX_SAMPLES) count = MAX_SAMPLES;
        free(s);
        s = calloc(count, sizeof *s);
        if (!s) return UINT64_MAX;
        rc = nv.proc_util(g_dev[device], s, &count, seen);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
    }
    if (rc == NVML_ERROR_NOT_FOUND) {
        free(s);
        return seen ? LOAD(d->nvml_busy_ns) : UINT64_MAX;
    }
    if (rc != NVML_SUCCESS) {
        free(s);
        return UINT64_MAX;
    }
    /* NVML numbers processes as the driver sees them (host pids); a process in a PID namespace
     * that shares the host's /proc recorded that number as host_pid. */
    int32_t pids[2 * HAMI_REGION_MAX_PROCS];
    int np = 0;
    for (int i = 0; i < HAMI_REGION_MAX_PROCS; i++) {
        int32_t pid = LOAD(r->shm->proc[i].pid);
        if (pid <= 0) continue;
        pids[np++] = pid;
        int32_t host = r->shm->proc[i].host_pid;
        if (host > 0 && host != pid) pids[np++] = host;
    }
    qsort(s, count, sizeof *s, by_time);
    /* With no earlier sample (seen == 0) the first period's start is unknown: it only opens the count. */
    unsigned long long prev = seen, newest = seen;
    uint64_t add_ns = 0;
    for (unsigned int i = 0; i < count;) {
        unsigned long long t = s[i].timeStamp;
        unsigned int util = 0;
        for (; i < count && s[i].timeStamp == t; i++)
            if (region_pid(pids, np, s[i].pid)) util += s[i].smUtil;
        if (t <= seen) continue;
        if (util > 100) util = 100;
        if (prev) {
            unsigned long long from = t - prev > MAX_PERIOD_US ? t - MAX_PERIOD_US : prev;
            add_ns += (uint64_t)(t - from) * 1000ull * util / 100;
        }
        prev = newest = t;
    }
    free(s);
    if (newest == seen) return seen ? LOAD(d->nvml_busy_ns) : UINT64_MAX;
    /* Claim the samples, then count them (a process that loses the race counts nothing twice). */
    if (!__atomic_compare_exchange_n(&d->nvml_seen_us, &seen, newest, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return UINT64_MAX;
    uint64_t total = __atomic_add_fetch(&d->nvml_busy_ns, add_ns, __ATOMIC_ACQ_REL);
    return seen ? total : UINT64_MAX; /* the first samples only open the count */
}

/* Device-wide reading: utilization of the last sample period, integrated since the last reading into
 * one of the region's counts (*busy, read at *at). */
static uint64_t integrate_rates(int device, uint64_t *busy, uint64_t *at) {
    nvmlUtilization_t u;
    if (!nv.rates || nv.rates(g_dev[device], &u) != NVML_SUCCESS) return UINT64_MAX;
    uint64_t now = hami_now_ns(), last = __atomic_load_n(at, __ATOMIC_ACQUIRE);
    if (!__atomic_compare_exchange_n(at, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return UINT64_MAX;
    if (!last) return UINT64_MAX;
    uint64_t dt = now - last;
    if (dt > MAX_PERIOD_US * 1000ull) dt = MAX_PERIOD_US * 1000ull;
    uint32_t gpu = u.gpu > 100 ? 100 : u.gpu;
    return __atomic_add_fetch(busy, dt * gpu / 100, __ATOMIC_ACQ_REL);
}

static uint64_t device_wide(const hami_region *r, int device) {
    hami_region_device *d = &r->shm->dev[device];
    return integrate_rates(device, &d->nvml_busy_ns, &d->nvml_rates_ns);
}

static uint64_t nvml_busy(const hami_region *r, int device, int by_index_ok) {
    if (!hami_nvml_available() || device < 0 || device >= HAMI_REGION_MAX_DEVICES || device >= r->device_count)
        return UINT64_MAX;
    if (__atomic_exchange_n(&g_fresh, 0, __ATOMIC_ACQ_REL)) {
        /* NVML was loaded just now, by this reading: a sampler started this
         * instant has nothing to say about the period the controller asks for. */
        if (!resolve(device, by_index_ok)) return UINT64_MAX;
        if (g_mode[device] == MODE_PROCESS) {
            unsigned int count = 0;
            nv.proc_util(g_dev[device], NULL, &count, 0);
        }
        return UINT64_MAX;
    }
    if (!resolve(device, by_index_ok)) return UINT64_MAX;
    if (g_mode[device] == MODE_PROCESS) {
        int unsupported = 0;
        uint64_t b = per_process(r, device, &unsupported);
        if (!unsupported) return b;
        g_mode[device] = MODE_RATES;
    }
    return g_mode[device] == MODE_RATES ? device_wide(r, device) : UINT64_MAX;
}

uint64_t hami_busy_from_nvml(const hami_region *r, int device) { return nvml_busy(r, device, 1); }

/* The device's busy time, any process: nvmlDeviceGetUtilizationRates (the share of the driver's last
 * sample period with a kernel running) integrated over the time between readings.  Its own count
 * in the region (nvml_dev_*), apart from the per-process one. */
static uint64_t device_busy_nvml(const hami_region *r, int device) {
    if (!hami_nvml_available() || device < 0 || device >= HAMI_REGION_MAX_DEVICES || device >= r->device_count)
        return UINT64_MAX;
    if (!resolve(device, !fake_state_named())) return UINT64_MAX;
    hami_region_device *d = &r->shm->dev[device];
    return integrate_rates(device, &d->nvml_dev_busy_ns, &d->nvml_dev_rates_ns);
}

/* ---- selection ---- */

#ifdef HAMI_TEST_HOOKS
/* Test builds only (native/testhooks, never shipped): the fake runtimes'
 * shared state, named by $HAMI_FAKE_GPU_STATE, is a source too. */
static int fake_state_named(void) {
    const char *fake = getenv("HAMI_FAKE_GPU_STATE");
    return fake && *fake;
}
static hami_busy_source_fn fake_source(void) { return hami_busy_from_fake_state; }
#else
static int fake_state_named(void) { return 0; }
static hami_busy_source_fn fake_source(void) { return NULL; }
#endif

/* Per device, decided on its first reading: NVML when it knows the device by
 * identity, else (test builds) the fake state, else NVML by index.  (With a
 * fake state in use the index assumption would pair fake devices with a
 * host's real GPUs.) */
static int g_auto[HAMI_REGION_MAX_DEVICES]; /* 0 undecided, 1 nvml, 2 fake, 3 nvml by index, 4 none */

static uint64_t auto_busy(const hami_region *r, int device) {
    if (device < 0 || device >= HAMI_REGION_MAX_DEVICES) return UINT64_MAX;
    int choice = LOAD(g_auto[device]);
    if (!choice) {
        int have_fake = fake_state_named();
        if (hami_nvml_available()) {
            if (__atomic_exchange_n(&g_fresh, 0, __ATOMIC_ACQ_REL)) {
                /* Loaded lazily (the limit was set after start): as in nvml_busy. */
                if (resolve(device, !have_fake) && g_mode[device] == MODE_PROCESS) {
                    unsigned int count = 0;
                    nv.proc_util(g_dev[device], NULL, &count, 0);
                }
                return UINT64_MAX;
            }
            if (resolve(device, 0)) choice = 1;
            else if (LOAD(g_map[device]) == MAP_UNKNOWN) return UINT64_MAX; /* driver not ready: decide later */
        }
        if (!choice) choice = have_fake ? 2 : hami_nvml_available() && resolve(device, 1) ? 3 : 4;
        __atomic_store_n(&g_auto[device], choice, __ATOMIC_RELEASE);
    }
    switch (choice) {
    case 1: return nvml_busy(r, device, 0);
    case 2: return fake_source() ? fake_source()(r, device) : UINT64_MAX;
    case 3: return nvml_busy(r, device, 1);
    default: return UINT64_MAX;
    }
}

hami_busy_source_fn hami_default_busy_source(int allow_nvml) {
    const char *want = getenv("HAMI_UTILIZATION_SOURCE");
    if (want && *want && strcmp(want, "auto") != 0) {
        if (!strcmp(want, "none")) return NULL;
        if (!strcmp(want, "fake") && fake_source()) return fake_source();
        if (!strcmp(want, "nvml") && allow_nvml) return hami_busy_from_nvml;
        if (strcmp(want, "nvml") != 0)
            fprintf(stderr, "[hami-limiter] HAMI_UTILIZATION_SOURCE=%s: want %s; using auto\n", want,
                    fake_source() ? "nvml, fake, none or auto" : "nvml, none or auto");
    }
    if (allow_nvml) return auto_busy;
    return fake_state_named() ? fake_source() : NULL;
}

#ifdef HAMI_TEST_HOOKS
static hami_busy_source_fn fake_device_source(void) { return hami_device_busy_from_fake_state; }
#else
static hami_busy_source_fn fake_device_source(void) { return NULL; }
#endif

/* As the per-process choice: forced by HAMI_UTILIZATION_SOURCE, else NVML where the device resolves
 * by identity, else the fake state (test builds), else NVML by index. */
static uint64_t auto_device_busy(const hami_region *r, int device) {
    if (device < 0 || device >= HAMI_REGION_MAX_DEVICES) return UINT64_MAX;
    if (hami_nvml_available() && resolve(device, 0)) return device_busy_nvml(r, device);
    if (fake_state_named() && fake_device_source()) return fake_device_source()(r, device);
    return hami_nvml_available() ? device_busy_nvml(r, device) : UINT64_MAX;
}

hami_busy_source_fn hami_default_device_busy_source(int allow_nvml) {
    const char *want = getenv("HAMI_UTILIZATION_SOURCE");
    if (want && !strcmp(want, "none")) return NULL;
    if (want && !strcmp(want, "fake") && fake_device_source()) return fake_device_source();
    if (want && !strcmp(want, "nvml")) return allow_nvml ? device_busy_nvml : NULL;
    if (allow_nvml) return auto_device_busy;
    return fake_state_named() ? fake_device_source() : NULL;
}

void hami_busy_source_prime(hami_busy_source_fn fn) {
    /* Load NVML when the workload starts rather than at its first throttled
     * launch, so that the first reading already covers a period. */
    if (fn == auto_busy || fn == hami_busy_from_nvml) {
        if (hami_nvml_available()) __atomic_store_n(&g_fresh, 0, __ATOMIC_RELEASE);
    }
}
