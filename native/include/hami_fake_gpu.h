/*
 * Shared state of the fake accelerators used by the test runtimes.
 *
 * The fake libcuda / libascendcl / libcnrt / libcndrv (and the fake NVML, which
 * only reads it) share one mmap'd file named by $HAMI_FAKE_GPU_STATE, so that
 * several test processes see one "device": its memory capacity, the bytes every
 * process holds, and a virtual timeline on which fake kernels run.  Without the
 * variable each process gets a private anonymous mapping.
 *
 * LAYOUT STABILITY: other components read this file.  Only append fields at the
 * end of the structures and bump HAMI_FAKE_GPU_VERSION when the layout changes.
 * All counters are updated with __atomic builtins; readers may use plain loads
 * of aligned 64-bit fields (or __atomic_load_n).
 *
 * When a process's device memory is freed.  A real driver frees it when the
 * process's descriptors of the device nodes are released, late in its exit
 * (after every exit handler, and after other files it holds may already be
 * released).  The fakes model exactly that: each process keeps the state file
 * open (its "device node") and holds an open-file-description lock on one byte
 * per slot it uses; its memory counts until the kernel drops that lock.  A slot
 * without a lock (no state file) is judged by its pid, as before.
 *
 * Killed half-way through its own bookkeeping.  A driver keeps its books in the
 * kernel, where SIGKILL cannot land between two writes; the fakes keep theirs in
 * this file, where it can.  A process killed between adding bytes to the
 * device's total and to its slot would leave bytes that no process holds and
 * nobody ever gives back: a device fuller than any process made it, and a peak
 * over every limit.  So every change of used_bytes (and of the slot table) is
 * made under one robust lock, with the values it changes saved first; the next
 * holder of a lock whose owner died puts them back.
 *
 * Device configuration (read by whichever process creates the file):
 *   HAMI_FAKE_<VENDOR>_DEVICES     device count (VENDOR = CUDA, ASCEND, CAMBRICON),
 *   HAMI_FAKE_DEVICES              ... fallback for any vendor, default 1
 *   HAMI_FAKE_<VENDOR>_MEMORY_MIB  capacity in MiB, one value or a comma list per device
 *   HAMI_FAKE_MEMORY_MIB           ... fallback, default 16384
 *   HAMI_FAKE_KERNEL_US            default fake kernel duration in microseconds (default 1000)
 *   HAMI_FAKE_QUEUE_US             how far one process's launch queue may run ahead (default 50000)
 *   HAMI_FAKE_LAUNCH_NS            host time one launch costs its caller (default 5000)
 *   HAMI_FAKE_QUEUE_DEPTH          kernels one process may have queued on a device (default 1024)
 *   HAMI_FAKE_SWITCH_EFFICIENCY    share of the device left to kernels while several contexts time-slice
 *                                  (per mille, default 906)
 * How the device spends its time is modelled in hami_fake_timeline.h (read its header for the
 * calibration of each constant).
 */
#ifndef HAMI_FAKE_GPU_H
#define HAMI_FAKE_GPU_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Open-file-description locks (Linux >= 3.15), also for includers without _GNU_SOURCE. */
#ifndef F_OFD_GETLK
#define F_OFD_GETLK 36
#define F_OFD_SETLK 37
#endif

#define HAMI_FAKE_GPU_MAGIC 0x31414746494D4148ULL /* "HAMIFGA1" as little-endian bytes */
#define HAMI_FAKE_GPU_VERSION 4u
#define HAMI_FAKE_GPU_MAX_DEVICES 16
#define HAMI_FAKE_GPU_MAX_PROCS 64
#define HAMI_FAKE_PROC_LOCKED 1u           /* the holder's "device node" lock guards the slot */
#define HAMI_FAKE_LOCK_BASE (1LL << 32)   /* lock bytes: base + device * MAX_PROCS + slot */

/* One process's share of one fake device.  pid 0 = free slot. */
typedef struct hami_fake_proc {
    int32_t pid;
    uint32_t flags;        /* HAMI_FAKE_PROC_*; was reserved (0) */
    uint64_t used_bytes;   /* device memory this pid holds now */
    uint64_t busy_ns;      /* device time this pid's kernels have run (hami_fake_timeline.h) */
    uint64_t launches;     /* kernels launched by this pid */
} hami_fake_proc;

typedef struct hami_fake_device {
    uint64_t total_bytes;      /* capacity */
    uint64_t used_bytes;       /* bytes held by all processes now */
    uint64_t peak_used_bytes;  /* high-water mark of used_bytes since creation */
    uint64_t busy_ns;          /* wall time during which some process had a kernel on the device */
    uint64_t advanced_ns;      /* CLOCK_MONOTONIC time up to which the timeline has been played */
    uint64_t launches;         /* kernels launched on this device */
    hami_fake_proc procs[HAMI_FAKE_GPU_MAX_PROCS];
    /* Host memory behind this device's managed allocations (version 2): never device capacity. */
    uint64_t host_bytes;
    uint64_t host_peak_bytes;
} hami_fake_device;

/* What one bookkeeping update changes, saved before its first write (version 3). */
typedef struct hami_fake_undo {
    uint32_t active;       /* 1 from the update's first write to its last */
    int32_t device;
    int32_t slot;          /* -1: the update changes the device's total only */
    int32_t pid;           /* the slot as it was */
    uint32_t flags;
    uint32_t reserved;
    uint64_t used_bytes;
    uint64_t device_used;  /* the device's used_bytes as it was */
} hami_fake_undo;

/* One breakpoint of a process's progress: from t_ns on, done_ns grows at a new rate (version 4). */
typedef struct hami_fake_break {
    uint64_t t_ns;
    uint64_t done_ns;
} hami_fake_break;

#define HAMI_FAKE_BREAKS 64

/* One process's context on one device: the work it queued and the work that ran, in device
 * nanoseconds as the kernels would take alone (version 4).  Its slot is the hami_fake_proc's. */
typedef struct hami_fake_lane {
    uint64_t queued_ns;
    uint64_t done_ns;
    uint64_t breaks;       /* breakpoints written so far (the ring holds the last HAMI_FAKE_BREAKS) */
    uint64_t rate_ppm;     /* progress per wall nanosecond of the segment that began at the newest break */
    hami_fake_break ring[HAMI_FAKE_BREAKS];
} hami_fake_lane;

/* How one device spends its time (version 4): played forward lazily under its lock. */
typedef struct hami_fake_timeline {
    pthread_mutex_t lock; /* robust, process-shared */
    hami_fake_lane lane[HAMI_FAKE_GPU_MAX_PROCS];
} hami_fake_timeline;

typedef struct hami_fake_gpu_state {
    uint64_t magic;
    uint32_t version;
    uint32_t device_count;
    uint64_t size;        /* sizeof(hami_fake_gpu_state) */
    uint64_t created_ns;  /* CLOCK_MONOTONIC at creation */
    hami_fake_device devices[HAMI_FAKE_GPU_MAX_DEVICES];
    /* version 3: the lock (robust, process-shared) every change of used_bytes and of the
     * slot table is made under, and the update in progress. */
    pthread_mutex_t book_lock;
    hami_fake_undo undo;
    hami_fake_timeline timeline[HAMI_FAKE_GPU_MAX_DEVICES]; /* version 4 */
} hami_fake_gpu_state;

_Static_assert(sizeof(hami_fake_proc) == 32, "fake GPU layout changed: bump HAMI_FAKE_GPU_VERSION");
_Static_assert(sizeof(hami_fake_device) == 48 + 32 * HAMI_FAKE_GPU_MAX_PROCS + 16, "fake GPU layout changed");
_Static_assert(sizeof(hami_fake_undo) == 40, "fake GPU layout changed: bump HAMI_FAKE_GPU_VERSION");

/* ---- helpers shared by the fake runtimes (static inline: header-only) ---- */

static inline uint64_t hami_fake_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline const char *hami_fake_env2(const char *vendor, const char *suffix, const char *fallback) {
    char name[96];
    snprintf(name, sizeof name, "HAMI_FAKE_%s_%s", vendor, suffix);
    const char *v = getenv(name);
    if (v && *v) return v;
    v = getenv(fallback);
    return (v && *v) ? v : NULL;
}

static inline void hami_fake_init_book_lock(pthread_mutex_t *m) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    /* Robust: a holder killed inside an update hands the next one EOWNERDEAD. */
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

static inline void hami_fake_init_state(hami_fake_gpu_state *s, const char *vendor) {
    memset(s, 0, sizeof *s);
    hami_fake_init_book_lock(&s->book_lock);
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_DEVICES; i++) hami_fake_init_book_lock(&s->timeline[i].lock);
    const char *count = hami_fake_env2(vendor, "DEVICES", "HAMI_FAKE_DEVICES");
    long n = count ? strtol(count, NULL, 10) : 1;
    if (n < 0) n = 0;
    if (n > HAMI_FAKE_GPU_MAX_DEVICES) n = HAMI_FAKE_GPU_MAX_DEVICES;
    const char *mem = hami_fake_env2(vendor, "MEMORY_MIB", "HAMI_FAKE_MEMORY_MIB");
    uint64_t last = 16384;
    const char *p = mem;
    for (long i = 0; i < n; i++) {
        /* A comma list gives one capacity per device; the last one repeats. */
        if (p && *p) {
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (end != p) last = v;
            p = (*end == ',') ? end + 1 : NULL;
        }
        s->devices[i].total_bytes = last << 20;
    }
    s->device_count = (uint32_t)n;
    s->size = sizeof *s;
    s->created_ns = hami_fake_now_ns();
    s->version = HAMI_FAKE_GPU_VERSION;
    s->magic = HAMI_FAKE_GPU_MAGIC;
}

/* This library's view of the state file (each fake library has its own). */
static hami_fake_gpu_state *hami_fake_mapped;
static int hami_fake_fd = -1; /* the process's "device node": closed when the process is torn down */
/* Slots whose "device node" lock this library's description holds, per device (bit = slot). */
static uint64_t hami_fake_held[HAMI_FAKE_GPU_MAX_DEVICES];

static inline void hami_fake_reopen_in_child(void) {
    /* A forked child is another process: its own description of the file, so
     * that the parent's locks are not the child's (and the parent's death shows). */
    if (hami_fake_fd < 0) return;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", hami_fake_fd);
    int fresh = open(self, O_RDWR | O_CLOEXEC);
    close(hami_fake_fd);
    hami_fake_fd = fresh;
    memset(hami_fake_held, 0, sizeof hami_fake_held); /* a fresh description holds no lock */
}

/* Maps the state named by $HAMI_FAKE_GPU_STATE, creating it when absent.
 * Creation writes a complete file under a temporary name and link()s it into
 * place, so a concurrent process never sees a half-initialised file. */
static inline hami_fake_gpu_state *hami_fake_gpu_attach(const char *vendor) {
    const char *path = getenv("HAMI_FAKE_GPU_STATE");
    hami_fake_gpu_state *s;
    if (!path || !*path) {
        s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) return NULL;
        hami_fake_init_state(s, vendor);
        return hami_fake_mapped = s;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        int tfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (tfd >= 0) {
            hami_fake_gpu_state *init = calloc(1, sizeof *init);
            int ok = init != NULL;
            if (ok) {
                hami_fake_init_state(init, vendor);
                ok = write(tfd, init, sizeof *init) == (ssize_t)sizeof *init;
                free(init);
            }
            close(tfd);
            if (ok) (void)link(tmp, path); /* EEXIST: another process won the race */
            unlink(tmp);
        }
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof *s) {
        close(fd);
        return NULL;
    }
    s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    if (s->magic != HAMI_FAKE_GPU_MAGIC || s->version != HAMI_FAKE_GPU_VERSION) {
        munmap(s, sizeof *s);
        close(fd);
        return NULL;
    }
    hami_fake_fd = fd;
    pthread_atfork(NULL, NULL, hami_fake_reopen_in_child);
    return hami_fake_mapped = s;
}

static inline struct flock hami_fake_lock_byte(const hami_fake_device *d, const hami_fake_proc *p, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = HAMI_FAKE_LOCK_BASE + (d - hami_fake_mapped->devices) * HAMI_FAKE_GPU_MAX_PROCS + (p - d->procs);
    fl.l_len = 1;
    return fl;
}

/* ---- the books: every change below is made under the book lock, as one undoable update ---- */

/* Puts back what an update cut short by its process's death had changed. */
static inline void hami_fake_undo_dead_update(hami_fake_gpu_state *s) {
    hami_fake_undo *u = &s->undo;
    if (!__atomic_load_n(&u->active, __ATOMIC_ACQUIRE)) return;
    if (u->device >= 0 && u->device < HAMI_FAKE_GPU_MAX_DEVICES) {
        hami_fake_device *d = &s->devices[u->device];
        if (u->slot >= 0 && u->slot < HAMI_FAKE_GPU_MAX_PROCS) {
            hami_fake_proc *p = &d->procs[u->slot];
            __atomic_store_n(&p->used_bytes, u->used_bytes, __ATOMIC_RELEASE);
            __atomic_store_n(&p->flags, u->flags, __ATOMIC_RELEASE);
            __atomic_store_n(&p->pid, u->pid, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&d->used_bytes, u->device_used, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&u->active, 0, __ATOMIC_RELEASE);
}

/* Every wait is bounded: an unlock wakes one waiter, and a waiter killed before it takes the
 * lock would leave the others asleep on a free lock.  Looking again every slice costs a slice. */
#define HAMI_FAKE_BOOK_SLICE_NS 2000000L

static inline void hami_fake_book_lock(void) {
    pthread_mutex_t *m = &hami_fake_mapped->book_lock;
    int rc = pthread_mutex_trylock(m);
    while (rc == EBUSY || rc == ETIMEDOUT) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += HAMI_FAKE_BOOK_SLICE_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        rc = pthread_mutex_timedlock(m, &until);
    }
    if (rc == EOWNERDEAD) {
        hami_fake_undo_dead_update(hami_fake_mapped);
        pthread_mutex_consistent(m);
    } else if (rc != 0) {
        abort(); /* books nobody can keep: fail loudly rather than count wrong */
    }
}

static inline void hami_fake_book_unlock(void) { pthread_mutex_unlock(&hami_fake_mapped->book_lock); }

#include "hami_fake_timeline.h"

/* Saves what an update of slot p (NULL: none) and device d is about to change.  The fences keep
 * the compiler from moving a change before the save or after the end: SIGKILL may land anywhere. */
static inline void hami_fake_update_begin(hami_fake_device *d, hami_fake_proc *p) {
    hami_fake_undo *u = &hami_fake_mapped->undo;
    u->device = (int32_t)(d - hami_fake_mapped->devices);
    u->slot = p ? (int32_t)(p - d->procs) : -1;
    if (p) {
        u->pid = p->pid;
        u->flags = p->flags;
        u->used_bytes = p->used_bytes;
    }
    u->device_used = d->used_bytes;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&u->active, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline void hami_fake_update_end(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&hami_fake_mapped->undo.active, 0, __ATOMIC_SEQ_CST);
}

/* Moves bytes in a slot (NULL: none) and in the device's total, as one update. */
static inline void hami_fake_book_add_locked(hami_fake_device *d, hami_fake_proc *p, uint64_t slot_add,
                                             uint64_t slot_sub, uint64_t dev_add, uint64_t dev_sub) {
    hami_fake_update_begin(d, p);
    if (p) __atomic_store_n(&p->used_bytes, p->used_bytes + slot_add - slot_sub, __ATOMIC_RELEASE);
    __atomic_store_n(&d->used_bytes, d->used_bytes + dev_add - dev_sub, __ATOMIC_RELEASE);
    hami_fake_update_end();
}

/* Takes the "device node" lock of a slot this process is claiming (inside its update). */
static inline void hami_fake_lock_slot(hami_fake_device *d, hami_fake_proc *p) {
    uint32_t flags = 0;
    if (hami_fake_fd >= 0) {
        struct flock fl = hami_fake_lock_byte(d, p, F_WRLCK);
        if (fcntl(hami_fake_fd, F_OFD_SETLK, &fl) == 0) {
            flags = HAMI_FAKE_PROC_LOCKED;
            hami_fake_held[d - hami_fake_mapped->devices] |= 1ull << (p - d->procs);
        }
    }
    __atomic_store_n(&p->flags, flags, __ATOMIC_RELEASE);
}

/* Dead = gone, or a zombie not yet reaped (it holds no device memory). */
static inline int hami_fake_pid_dead(int32_t pid) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Whether the memory of a slot's process has been freed, as a driver frees it:
 * the slot's lock is gone once the process's "device node" is released; a slot
 * without one falls back on its pid. */
static inline int hami_fake_slot_dead(const hami_fake_device *d, const hami_fake_proc *p, int32_t pid) {
    if (pid == (int32_t)getpid()) return 0;
    if ((__atomic_load_n(&p->flags, __ATOMIC_ACQUIRE) & HAMI_FAKE_PROC_LOCKED) && hami_fake_fd >= 0 &&
        hami_fake_mapped) {
        struct flock fl = hami_fake_lock_byte(d, p, F_WRLCK);
        if (fcntl(hami_fake_fd, F_OFD_GETLK, &fl) != 0) return 0; /* cannot tell: keep its memory */
        return fl.l_type == F_UNLCK;
    }
    return hami_fake_pid_dead(pid);
}

/* Gives a dead process's slot back, with its bytes (a driver frees a killed process's memory);
 * claimed_by != 0 hands the slot straight to that pid. */
static inline void hami_fake_recycle_locked(hami_fake_device *d, hami_fake_proc *p, int32_t claimed_by) {
    hami_fake_update_begin(d, p);
    __atomic_store_n(&d->used_bytes, d->used_bytes - p->used_bytes, __ATOMIC_RELEASE);
    __atomic_store_n(&p->used_bytes, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->busy_ns, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->launches, 0, __ATOMIC_RELEASE);
    hami_fake_lane_drop(d, (int)(p - d->procs));
    if (claimed_by) hami_fake_lock_slot(d, p);
    else __atomic_store_n(&p->flags, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->pid, claimed_by, __ATOMIC_RELEASE);
    hami_fake_update_end();
}

static inline int hami_fake_reap_dead_locked(hami_fake_device *d) {
    int n = 0;
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
        hami_fake_proc *p = &d->procs[i];
        int32_t cur = p->pid;
        if (cur > 0 && hami_fake_slot_dead(d, p, cur)) {
            hami_fake_recycle_locked(d, p, 0);
            n++;
        }
    }
    return n;
}

/* A slot of this pid found at its first use in this library: this library claimed it already
 * (another thread), another fake library of the image shares it (its lock is held by that
 * library's description), or an earlier image left it before exec() -- which released the
 * image's "device node" and so freed its memory. */
static inline void hami_fake_adopt_own_slot(hami_fake_device *d, hami_fake_proc *p) {
    uint64_t bit = 1ull << (p - d->procs);
    if (hami_fake_held[d - hami_fake_mapped->devices] & bit) return; /* ours */
    if (!(p->flags & HAMI_FAKE_PROC_LOCKED) || hami_fake_fd < 0) return;
    struct flock fl = hami_fake_lock_byte(d, p, F_WRLCK);
    if (fcntl(hami_fake_fd, F_OFD_SETLK, &fl) != 0) return; /* held in this image: shared */
    hami_fake_held[d - hami_fake_mapped->devices] |= bit;
    hami_fake_book_add_locked(d, p, 0, p->used_bytes, 0, p->used_bytes);
}

static inline hami_fake_proc *hami_fake_proc_slot_locked(hami_fake_device *d, int32_t pid) {
    for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
        if (d->procs[i].pid == pid) {
            hami_fake_adopt_own_slot(d, &d->procs[i]);
            return &d->procs[i];
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < HAMI_FAKE_GPU_MAX_PROCS; i++) {
            hami_fake_proc *p = &d->procs[i];
            int32_t cur = p->pid;
            if (cur == 0 || (pass == 1 && cur > 0 && hami_fake_slot_dead(d, p, cur))) {
                hami_fake_recycle_locked(d, p, pid);
                return p;
            }
        }
    }
    return NULL;
}

/* This pid's slot on a device, claimed on first use (at most one per pid and
 * device).  A slot of a dead pid is recycled and its bytes given back, as a real
 * driver frees a dead process's memory.  Returns NULL when all slots are taken
 * by live processes. */
static inline hami_fake_proc *hami_fake_proc_slot(hami_fake_device *d, int32_t pid) {
    hami_fake_book_lock();
    hami_fake_proc *p = hami_fake_proc_slot_locked(d, pid);
    hami_fake_book_unlock();
    return p;
}

/* Gives back the bytes of dead processes (a real driver frees a killed
 * process's memory); returns how many slots were recycled. */
static inline int hami_fake_reap_dead(hami_fake_device *d) {
    hami_fake_book_lock();
    int n = hami_fake_reap_dead_locked(d);
    hami_fake_book_unlock();
    return n;
}

/* Takes bytes from the device's capacity for slot p (may be NULL); 0 on success, -1 when they
 * do not fit.
 *
 * A real driver frees a process's memory when the process is torn down, before
 * it is even a zombie; this fake only learns of a death when it looks.  So
 * before used_bytes may set a new high-water mark (or be refused), the bytes of
 * dead pids are given back first: peak_used_bytes then never counts memory of a
 * process that was already dead (killed, or exited without its destructors) when
 * the allocation began -- memory that a limiter is right to have handed out again. */
static inline int hami_fake_mem_take(hami_fake_device *d, hami_fake_proc *p, uint64_t bytes) {
    hami_fake_book_lock();
    uint64_t used = d->used_bytes, total = d->total_bytes;
    if (used + bytes > d->peak_used_bytes || used + bytes > total) {
        hami_fake_reap_dead_locked(d);
        used = d->used_bytes;
    }
    int fits = used + bytes <= total && used + bytes >= used;
    if (fits) {
        hami_fake_book_add_locked(d, p, bytes, 0, bytes, 0);
        if (used + bytes > d->peak_used_bytes) __atomic_store_n(&d->peak_used_bytes, used + bytes, __ATOMIC_RELEASE);
    }
    hami_fake_book_unlock();
    return fits ? 0 : -1;
}

/* Gives bytes back to the device's capacity, from slot p (may be NULL: memory no process owns). */
static inline void hami_fake_mem_give(hami_fake_device *d, hami_fake_proc *p, uint64_t bytes) {
    hami_fake_book_lock();
    hami_fake_book_add_locked(d, p, 0, p ? bytes : 0, 0, bytes);
    hami_fake_book_unlock();
}

/* Everything slot p holds goes back (a process's teardown). */
static inline void hami_fake_mem_give_all(hami_fake_device *d, hami_fake_proc *p) {
    hami_fake_book_lock();
    hami_fake_book_add_locked(d, p, 0, p->used_bytes, 0, p->used_bytes);
    hami_fake_book_unlock();
}

/* Bytes of slot p that stay on the device but are no process's any more (an exported allocation). */
static inline void hami_fake_mem_disown(hami_fake_device *d, hami_fake_proc *p, uint64_t bytes) {
    hami_fake_book_lock();
    hami_fake_book_add_locked(d, p, 0, bytes, 0, 0);
    hami_fake_book_unlock();
}

/* Runs a fake kernel of duration_ns for process slot p (hami_fake_timeline.h): the caller pays the
 * launch's host time and returns once the kernel is queued behind the process's earlier work. */
static inline void hami_fake_run_kernel(hami_fake_device *d, hami_fake_proc *p, uint64_t duration_ns) {
    __atomic_fetch_add(&d->launches, 1, __ATOMIC_RELAXED);
    if (!p) return;
    __atomic_fetch_add(&p->launches, 1, __ATOMIC_RELAXED);
    hami_fake_lane_launch(d, (int)(p - d->procs), duration_ns);
}

/* Waits until every kernel process slot p queued on the device so far has run (its context's synchronize). */
static inline void hami_fake_synchronize(hami_fake_device *d, hami_fake_proc *p) {
    if (!p) return;
    int slot = (int)(p - d->procs);
    hami_fake_lane_wait(d, slot, hami_fake_lane_mark(d, slot));
}

/* Whether process slot p still has kernels queued or running on the device. */
static inline int hami_fake_busy(hami_fake_device *d, hami_fake_proc *p) {
    if (!p) return 0;
    int slot = (int)(p - d->procs);
    return !hami_fake_lane_reached(d, slot, hami_fake_lane_mark(d, slot));
}

/* Kernel duration used when the test did not choose one per thread. */
static inline uint64_t hami_fake_default_kernel_ns(void) {
    const char *v = getenv("HAMI_FAKE_KERNEL_US");
    return (v && *v) ? strtoull(v, NULL, 10) * 1000ull : 1000000ull;
}

#endif /* HAMI_FAKE_GPU_H */
