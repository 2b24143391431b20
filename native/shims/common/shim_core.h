/* What every vendor shim shares: reading the allocation's environment,
 * attaching the region, this process's slot, and the memory/compute checks
 * the wrappers call around the vendor's functions. */
#ifndef HAMI_SHIM_CORE_H
#define HAMI_SHIM_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "hami_region.h"

enum hami_shim_mode {
    HAMI_SHIM_PASSTHROUGH = 1, /* no region and no limits: wrappers only forward */
    HAMI_SHIM_ACTIVE = 2,
    HAMI_SHIM_BROKEN = 3,      /* region unusable: refuse allocations rather than mis-account */
};

typedef struct hami_shim_config {
    const char *tag;                 /* "cuda", "ascend", "cambricon": for messages */
    const char *const *memory_vars;  /* NULL-terminated, in precedence order; "<NAME>_<i>" beats "<NAME>" */
    const char *const *core_vars;
    const char *const *region_vars;  /* a path, or "user": the per-user default region (regionpath.c) */
    hami_busy_source_fn busy_source; /* may be NULL */
    hami_busy_source_fn device_busy_source; /* the device's busy time, any process (share mode); may be NULL */
} hami_shim_config;

typedef struct hami_shim {
    int mode;
    int slot;
    hami_region *region;
    hami_busy_source_fn busy_source;
    hami_pace_sources pace;
    const char *tag;
} hami_shim;

extern hami_shim hami_g_shim;

/* Reads the environment and attaches the region.  Call once (pthread_once). */
void hami_shim_setup(const hami_shim_config *cfg);

/* HAMI_OK, HAMI_E_OOM, or another HAMI_E_* when the shim is broken.  A HAMI_E_OOM is counted in the
 * region as one refusal: call it where the refusal goes back to the application. */
int hami_shim_reserve(int device, uint64_t bytes);
/* The same, uncounted: for a first try the shim retries itself after making room, and for charges
 * no application call waits on. */
int hami_shim_try_reserve(int device, uint64_t bytes);
/* Counts one allocation refused over the memory limit (after hami_shim_try_reserve's last HAMI_E_OOM). */
void hami_shim_count_refusal(int device);
void hami_shim_release(int device, uint64_t bytes);
/* Shared physical allocations (VMM shareable handles), through the region: see hami_region_share. */
int hami_shim_share(int device, uint64_t size, uint64_t key_dev, uint64_t key_ino);
int hami_shim_join(uint64_t key_dev, uint64_t key_ino, uint64_t *size, int *device);
void hami_shim_leave_shared(int entry);
/* Virtual device memory: moves reserved bytes into (out of) this process's spilled part; a spill past
 * the host cap (HAMI_E_OOM) is counted as a refusal. */
int hami_shim_spill(int device, uint64_t bytes);
void hami_shim_unspill(int device, uint64_t bytes);

/* Whether a device's allocations may spill to host memory (HAMI_DEV_VIRTUAL). */
static inline int hami_shim_virtual(int device) {
    hami_region *r = hami_g_shim.region;
    return hami_g_shim.mode == HAMI_SHIM_ACTIVE && device >= 0 && device < r->device_count &&
           (__atomic_load_n(&r->shm->dev[device].flags, __ATOMIC_ACQUIRE) & HAMI_DEV_VIRTUAL);
}
/* Clamps a vendor's (free, total) to the device's limit.  Returns 0 if it did nothing. */
int hami_shim_clamp_meminfo(int device, uint64_t *free_bytes, uint64_t *total_bytes);

static inline int hami_shim_accounting(void) { return hami_g_shim.mode != HAMI_SHIM_PASSTHROUGH; }

/* Hot path of every launch: two loads when no device has a compute limit. */
static inline int hami_shim_compute_limited(void) {
    hami_region *r = hami_g_shim.region;
    return r && __atomic_load_n(&r->shm->core_limited_mask, __ATOMIC_RELAXED) != 0;
}

/* Shims that cannot time their launches: gate and charge the learned per-launch cost. */
static inline void hami_shim_throttle(int device) {
    hami_pace_launch(hami_g_shim.region, device, &hami_g_shim.pace);
}
/* Shims that time their launches: gate before, charge what the launch takes. */
static inline void hami_shim_pace_gate(int device) { hami_pace_gate(hami_g_shim.region, device, &hami_g_shim.pace); }
static inline void hami_shim_pace_charge(int device, int64_t device_ns) {
    hami_pace_charge(hami_g_shim.region, device, device_ns);
}

/* Busy-time sources (busy_nvml.c; test builds add native/testhooks/busy_fake.c). */
#ifdef HAMI_TEST_HOOKS
uint64_t hami_busy_from_fake_state(const hami_region *r, int device);
uint64_t hami_device_busy_from_fake_state(const hami_region *r, int device);
/* regionpath.c: the per-user default region, HAMI_REGION_PATH=user.  Fills path (created folder,
 * checked as the SDK checks its own) and returns 0, or returns -1 with a reason in err. */
int hami_user_region_path(char *path, size_t len, char *err, size_t errlen);

#endif
/* The region's own processes' device time from NVML's per-process samples
 * (device-wide utilization where the driver has no per-process samples). */
uint64_t hami_busy_from_nvml(const hami_region *r, int device);
/* $HAMI_UTILIZATION_SOURCE = nvml | fake | none forces one source.  Otherwise
 * (auto), per device: NVML when libnvidia-ml.so.1 loads and knows the device
 * by UUID or PCI bus id, else (test builds only) the fake state when $HAMI_FAKE_GPU_STATE is set,
 * else NVML by index, else none (open loop).  allow_nvml = 0: no NVML at all. */
hami_busy_source_fn hami_default_busy_source(int allow_nvml);
/* The device's busy time (any process), chosen the same way: NVML's device-wide utilization, or
 * (test builds) the fake state's; NULL when neither. */
hami_busy_source_fn hami_default_device_busy_source(int allow_nvml);
/* Loads what a source needs now (called at setup when a compute limit is set). */
void hami_busy_source_prime(hami_busy_source_fn fn);
int hami_nvml_available(void);
/* A vendor's device identity for the NVML source: fills uuid ("GPU-...") and
 * bus_id ("0000:18:00.0"), either may be left empty; returns non-zero when the
 * runtime cannot tell yet (asked again later). */
typedef int (*hami_device_identity_fn)(int device, char *uuid, size_t uuid_len, char *bus_id, size_t bus_len);
void hami_busy_set_identity(hami_device_identity_fn fn);

/* regionpath.c: the per-user default region, HAMI_REGION_PATH=user.  Fills path (created folder,
 * checked as the SDK checks its own) and returns 0, or returns -1 with a reason in err. */
int hami_user_region_path(char *path, size_t len, char *err, size_t errlen);

#endif
