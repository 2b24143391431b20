/*
 * The limiter core: one shared accounting region per allocation.
 *
 * A region is an mmap'd file.  Its header (magic, version, sizes, checksum over
 * that static part) lets every opener refuse a truncated, corrupt or foreign
 * file instead of accounting against garbage.  The rest holds, per device, the
 * memory limit, the compute limit, the bytes reserved and the token-bucket
 * state, and a table of process slots.
 *
 * A slot is keyed by the process's identity as it sees itself: its PID
 * namespace (inode of /proc/self/ns/pid), its pid in that namespace and its
 * start time.  Pids alone mean nothing across containers (every container's
 * first process is pid 1), so liveness is not read from pids: each registered
 * process holds an open-file-description lock on one byte of the region file
 * (offset HAMI_SLOT_LOCK_BASE + slot).  The kernel drops it when the process
 * dies, whatever namespace the process or the observer is in.  /proc is
 * consulted only for slots of the observer's own namespace (to wait out a
 * process still tearing down) and for regions without a file.
 *
 * Memory is *reserved* here before the vendor allocator runs and given back if
 * that call fails, all under one robust process-shared mutex, so concurrent
 * processes can never pass the limit together.
 *
 * This header is the C API used by the shims and by the cffi module
 * (hami_devices._native); keep it free of vendor types.
 */
#ifndef HAMI_REGION_H
#define HAMI_REGION_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define HAMI_REGION_MAGIC 0x314E4752494D4148ULL /* "HAMIRGN1" as little-endian bytes */
#define HAMI_REGION_VERSION 5u
#define HAMI_REGION_MAX_DEVICES 16
#define HAMI_REGION_MAX_PROCS 256
#define HAMI_REGION_MAX_SHARED 64

/* Return codes of the core API (negative errno values are also possible). */
#define HAMI_OK 0
#define HAMI_E_OOM 1        /* the reservation would pass the memory limit */
#define HAMI_E_INVALID 2    /* bad argument */
#define HAMI_E_CORRUPT 3    /* region failed validation */
#define HAMI_E_NOSLOT 4     /* every process slot is held by a live process */
#define HAMI_E_IO 5         /* open/mmap/write failed (errno in the message) */
#define HAMI_E_LOCK 6       /* the mutex is not recoverable */
#define HAMI_E_EXISTS 7     /* create without replace found an existing file */
#define HAMI_E_PERM 8       /* the file or its folder fails the ownership/permission checks */

/* Liveness lock bytes lie past the end of the data: locks need no bytes to exist. */
#define HAMI_SLOT_LOCK_BASE (1LL << 32)

/* hami_region_create flags */
#define HAMI_CREATE_REPLACE 1u    /* atomically replace an existing file (rename) */
#define HAMI_CREATE_OR_OPEN 2u    /* open the existing file instead of failing */

typedef struct hami_region_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;   /* sizeof(hami_region_header) */
    uint64_t total_size;    /* sizeof(hami_region_shm) == file size */
    uint32_t device_count;  /* devices described by this region */
    uint32_t max_devices;   /* HAMI_REGION_MAX_DEVICES at creation */
    uint32_t max_procs;     /* HAMI_REGION_MAX_PROCS at creation */
    uint32_t reserved;
    uint64_t checksum;      /* FNV-1a over the fields above */
} hami_region_header;

/* Per device.  Limits are written under the lock and read with atomic loads. */
typedef struct hami_region_device {
    uint64_t memory_limit;  /* bytes; 0 = unlimited */
    uint64_t memory_used;   /* bytes reserved by all live slots */
    uint64_t memory_peak;   /* high-water mark of memory_used */
    uint32_t core_limit;    /* percent; 0 or >= 100 = unlimited */
    uint32_t flags;         /* HAMI_DEV_*, written under the lock */
    /* Compute pacing (pacer.c): a budget of device time, in GCRA form.  Each launch is charged the
     * device time it will take (x the correction k); at a rate of R percent a charge of c ns moves
     * tat by c * 100 / R; a launch waits while tat runs more than the burst ahead of now. */
    uint64_t tat_ns;
    uint64_t rate_x100;       /* share mode: percent x 100 allowed now (>= the limit); 0 = the limit */
    uint64_t launches;        /* launches that passed the gate */
    uint64_t waits;           /* launches that had to wait */
    uint64_t charged_ns;      /* device time charged so far */
    uint64_t k_ppm;           /* correction of the charges learned from the driver's reading; 0 = 1.0 */
    uint64_t cost_ns;         /* device time per launch learned from the reading (shims without probes) */
    /* controller, run by whichever process claims ctl_last_ns */
    uint64_t ctl_last_ns;
    uint64_t ctl_busy_ns;     /* the allocation's device time (the reading) at its last new sample */
    uint64_t ctl_busy_at_ns;  /* when that sample was taken in */
    uint64_t ctl_charged_ns;  /* charged_ns then */
    uint64_t ctl_launches;
    uint64_t ctl_waits;       /* waits at the last controller run */
    uint64_t ctl_dev_busy_ns; /* the device's busy time (any process) at its last new sample */
    uint64_t ctl_dev_at_ns;
    uint64_t ewma_busy_ns;    /* smoothed device time per sample span, and the charges over the same spans */
    uint64_t ewma_charged_ns;
    uint64_t util_x100;       /* measured utilization of this region's processes, percent * 100 */
    uint64_t util_at_ns;      /* CLOCK_MONOTONIC time util_x100 was published; 0 = never */
    /* NVML utilization source (shims/common/busy_nvml.c): its running count lives
     * here, not in one process, so whichever process runs the controller
     * continues the same count.  These were padding (zero) in older builds. */
    uint64_t nvml_busy_ns;    /* device time integrated from NVML samples so far */
    uint64_t nvml_seen_us;    /* timeStamp of the newest per-process sample integrated */
    uint64_t nvml_rates_ns;   /* CLOCK_MONOTONIC of the last device-wide reading (fallback) */
    uint64_t nvml_dev_busy_ns;  /* the device's busy time from NVML's device-wide utilization (share mode) */
    uint64_t nvml_dev_rates_ns; /* CLOCK_MONOTONIC of the last device-wide reading for it */
    /* Virtual device memory (HAMI_DEV_VIRTUAL): the part of memory_used that the card
     * could not hold physically, served from host-backed managed memory instead. */
    uint64_t spill_used;      /* bytes of memory_used served from host memory */
    uint64_t spill_limit;     /* most bytes that may be served from host memory; 0 = up to memory_limit */
    uint64_t spill_peak;      /* high-water mark of spill_used */
    /* Allocations refused over the memory limit (or the host-spill cap), counted by the shim where it
     * hands the runtime's out-of-memory code back; a retry the shim makes itself is not counted twice.
     * A launch the pacer holds back (waits above) is the compute refusal: it is not counted again. */
    uint64_t refused_memory;
} hami_region_device;

/* hami_region_device.flags */
#define HAMI_DEV_VIRTUAL 1u   /* allocations the card cannot hold physically spill to host memory */
#define HAMI_DEV_SHARE 2u     /* compute policy share: the limit is a guarantee, idle device time may be used */

/* hami_region_proc.flags */
#define HAMI_PROC_LOCKED 1u   /* the process holds its slot's liveness lock */

typedef struct hami_region_proc {
    int32_t pid;            /* 0 = free; otherwise the pid in the process's own PID namespace */
    uint32_t flags;         /* HAMI_PROC_* */
    uint64_t start_time;    /* /proc/self/stat field 22 (clock ticks since boot, the same in every namespace) */
    uint64_t pidns;         /* inode of the process's /proc/self/ns/pid; 0 = unknown */
    int32_t host_pid;       /* its pid as its /proc mount numbers it (NSpid, outermost): for people, not liveness */
    uint32_t reserved;
    uint64_t used[HAMI_REGION_MAX_DEVICES];
    uint64_t spilled[HAMI_REGION_MAX_DEVICES]; /* the part of used[] served from host memory */
} hami_region_proc;

/* A VMM allocation exported as a shareable handle: the physical memory lives while
 * any process holds a handle to it or a mapping of it, in whichever process.  It
 * is charged once, to one of its holders (the payer); when the payer lets go, the
 * charge moves to another holder, and with the last holder it goes. */
typedef struct hami_region_shared {
    uint64_t key_dev, key_ino;  /* identity of the exported handle (fstat of the POSIX fd) */
    uint64_t size;
    int32_t device;
    int32_t payer;              /* slot whose used[device] carries the charge; -1 = entry free */
    uint64_t holders[HAMI_REGION_MAX_PROCS / 64]; /* bit s: slot s holds a handle or mapping */
} hami_region_shared;

typedef struct hami_region_shm {
    hami_region_header hdr;
    uint8_t pad0[64 - sizeof(hami_region_header) % 64];
    pthread_mutex_t lock;            /* robust + process-shared */
    uint32_t core_limited_mask;      /* bit d set: device d has a compute limit (hot-path check) */
    uint32_t pad1;
    uint64_t last_reclaim_ns;        /* rate-limits reclaim scans on the OOM path */
    hami_region_device dev[HAMI_REGION_MAX_DEVICES];
    hami_region_proc proc[HAMI_REGION_MAX_PROCS];
    hami_region_shared shared[HAMI_REGION_MAX_SHARED];
} hami_region_shm;

/* The file layout is a contract between processes built at different times:
 * any change must bump HAMI_REGION_VERSION (old files are then refused). */
_Static_assert(sizeof(hami_region_header) == 48, "region header layout changed: bump HAMI_REGION_VERSION");
_Static_assert(sizeof(hami_region_device) == 256, "region device layout changed: bump HAMI_REGION_VERSION");
_Static_assert(sizeof(hami_region_proc) == 288, "region slot layout changed: bump HAMI_REGION_VERSION");
_Static_assert(sizeof(hami_region_shared) == 64, "region shared-allocation layout changed: bump HAMI_REGION_VERSION");

/* One process's handle on a region (process-local, never shared). */
typedef struct hami_region {
    hami_region_shm *shm;
    int32_t device_count;
    int owns_mapping;
    int fd;                 /* the region file, kept open for liveness locks; -1 for an anonymous region */
    int self_slot;          /* the slot this handle registered (and holds the lock of), or -1 */
    uint64_t pidns;         /* this process's PID namespace when the handle was made */
} hami_region;

/* Who a process is, as it can tell itself. */
typedef struct hami_proc_identity {
    int32_t pid;
    int32_t host_pid;
    uint64_t start_time;
    uint64_t pidns;
} hami_proc_identity;

/* Snapshot types for readers (Python). */
typedef struct hami_device_info {
    uint64_t memory_limit;
    uint64_t memory_used;
    uint64_t memory_peak;
    uint32_t core_limit;
    int32_t util_valid;     /* 1 when util_x100 was measured in the last 2 s */
    uint64_t util_x100;
    uint64_t launches;
    uint32_t flags;         /* HAMI_DEV_* */
    uint32_t reserved;
    uint64_t spill_used;
    uint64_t spill_limit;
    uint64_t spill_peak;
    uint64_t refused_memory;  /* allocations refused over the memory limit, since the region was made */
    uint64_t refused_compute; /* launches the pacer held back past its burst (hami_region_device.waits) */
} hami_device_info;

typedef struct hami_proc_info {
    int32_t pid;
    int32_t alive;
    uint64_t start_time;
    uint64_t pidns;
    int32_t host_pid;
    int32_t locked;         /* 1 when liveness comes from the slot's lock */
    uint64_t used[HAMI_REGION_MAX_DEVICES];
} hami_proc_info;

/* Cumulative device time (ns) used by the region's processes on a device, or
 * UINT64_MAX when unknown.  Installed per process by the shim (fake state or NVML). */
typedef uint64_t (*hami_busy_source_fn)(const hami_region *r, int device);

/* What the pacer reads: the allocation's own device time, and the device's busy time (any process,
 * for share mode's idle time); either may be NULL or answer UINT64_MAX. */
typedef struct hami_pace_sources {
    hami_busy_source_fn own;
    hami_busy_source_fn device;
} hami_pace_sources;

/* region.c */
int hami_region_create(const char *path, int device_count, const uint64_t *memory_limits,
                       const uint32_t *core_limits, unsigned flags, hami_region **out, char *err,
                       size_t errlen);
int hami_region_open(const char *path, hami_region **out, char *err, size_t errlen);
int hami_region_anonymous(int device_count, const uint64_t *memory_limits, const uint32_t *core_limits,
                          hami_region **out);
void hami_region_close(hami_region *r);
int hami_region_validate(const hami_region_shm *shm, size_t file_size, char *err, size_t errlen);
uint64_t hami_region_checksum(const hami_region_header *h);
int hami_region_lock(hami_region *r);
void hami_region_unlock(hami_region *r);
/* In a forked child: a fresh open file description of the same file (the
 * inherited one holds the parent's liveness lock) and no slot of its own. */
void hami_region_after_fork_child(hami_region *r);
/* Checks an existing region file before it is mapped: a regular file, not a
 * symbolic link, owned by this user or root, writable by nobody else. */
int hami_region_check_file(int fd, const char *path, char *err, size_t errlen);
/* Checks the folder a region is created in: not writable by others. */
int hami_region_check_dir(const char *path, char *err, size_t errlen);

/* accounting.c */
int hami_region_set_limit(hami_region *r, int device, uint64_t memory_limit, uint32_t core_limit);
/* Registers the calling process (its identity and its liveness lock); returns its slot or -HAMI_E_*. */
int hami_region_register_self(hami_region *r);
/* Registers a process by pid and start time without a lock (liveness from /proc, same namespace only). */
int hami_region_register(hami_region *r, int32_t pid, uint64_t start_time);
void hami_region_unregister(hami_region *r, int slot);
/* An exiting process: frees its slot if it holds no memory (returns 1).  A slot
 * still holding memory is left for the reclaim scan, which frees it once the
 * process is gone or has finished exiting (every thread gone or a zombie) -- when a driver has really freed that memory,
 * not while the process is still running its exit handlers (returns 0). */
int hami_region_leave(hami_region *r, int slot);
int hami_region_reserve(hami_region *r, int slot, int device, uint64_t bytes);
/* Counts one allocation refused over a device's memory limit (the shim calls it once per refusal it
 * returns to the application, not per reservation it tried). */
void hami_region_count_refusal(hami_region *r, int device);
void hami_region_release(hami_region *r, int slot, int device, uint64_t bytes);
/* Virtual device memory: turns spilling on or off for a device, with a cap on host-backed bytes (0:
 * up to the memory limit).  Spill accounting moves bytes the slot already reserved into its spilled
 * part (HAMI_E_OOM past the cap, HAMI_E_INVALID when the device is not virtual); the release moves
 * them back (the reservation itself goes with hami_region_release). */
int hami_region_set_virtual(hami_region *r, int device, int enabled, uint64_t spill_limit);
/* Shared physical allocations (VMM shareable handles).  share: the slot, which already carries
 * the allocation's charge, exports it under a key; returns the entry (or -HAMI_E_*).  join: a
 * slot that imported a handle of that key becomes a holder; returns the entry and its size and
 * device, or -1 when no process of this region exported it.  leave: the slot holds no handle or
 * mapping of it any more; the charge moves to another holder, or goes with the last one. */
int hami_region_share(hami_region *r, int slot, int device, uint64_t size, uint64_t key_dev, uint64_t key_ino);
int hami_region_join(hami_region *r, int slot, uint64_t key_dev, uint64_t key_ino, uint64_t *size, int *device);
void hami_region_leave_shared(hami_region *r, int slot, int entry);
int hami_region_spill(hami_region *r, int slot, int device, uint64_t bytes);
void hami_region_unspill(hami_region *r, int slot, int device, uint64_t bytes);
int hami_region_reclaim_dead(hami_region *r);
int hami_region_device_info(hami_region *r, int device, hami_device_info *out);
int hami_region_proc_infos(hami_region *r, hami_proc_info *out, int max);
/* Reads many regions in one call (an exporter's scrape): region i's devices land in
 * dev[dev_off[i] .. dev_off[i+1]) and its processes in proc[proc_off[i] .. proc_off[i+1]),
 * as hami_region_device_info and hami_region_proc_infos give them; a NULL region has none.
 * dev holds n * HAMI_REGION_MAX_DEVICES entries, dev_off and proc_off n + 1.  Returns the
 * process entries needed: when that exceeds max_procs the output is incomplete and the
 * caller retries with at least that much room. */
int hami_regions_usage(hami_region *const *regions, int n, hami_device_info *dev, int *dev_off,
                       hami_proc_info *proc, int max_procs, int *proc_off);
int hami_region_device_count(const hami_region *r);

/* procinfo.c */
uint64_t hami_proc_start_time(int32_t pid);   /* 0 when the process does not exist (or is a zombie) */
int hami_proc_alive(int32_t pid, uint64_t start_time);
int hami_proc_self(hami_proc_identity *out);  /* from /proc/self: valid inside any PID namespace */
uint64_t hami_proc_pidns(void);               /* inode of /proc/self/ns/pid, 0 when unknown */
uint64_t hami_now_ns(void);

/* slotlock.c: the liveness locks (open-file-description locks, Linux >= 3.15). */
int hami_slot_lock_take(int fd, int slot);   /* 0 taken, 1 held by another, -1 error */
void hami_slot_lock_drop(int fd, int slot);
int hami_slot_lock_held(int fd, int slot);   /* 1 held by another description, 0 free, -1 cannot tell */

/* pacer.c: compute shares paced on device time.
 * gate: called before a launch; waits while the allocation's charges run ahead of its share.
 * charge: the device time a launch takes (a negative true-up corrects an earlier estimate).
 * launch: gate + charge of the learned per-launch cost, for shims that cannot time their launches. */
void hami_pace_gate(hami_region *r, int device, const hami_pace_sources *src);
void hami_pace_charge(hami_region *r, int device, int64_t device_ns);
void hami_pace_launch(hami_region *r, int device, const hami_pace_sources *src);
void hami_pace_reset(hami_region *r, int device);
/* accounting.c: the compute policy of a device, cap (0) or share (1). */
int hami_region_set_core_policy(hami_region *r, int device, int share);

/* envcfg.c: "1073741824", "1024m", "1g", "512k" (case-insensitive; optional "i"/"b"). */
int hami_parse_bytes(const char *text, uint64_t *out);

#endif /* HAMI_REGION_H */
