/* Region file lifecycle: create, open + check + validate, map, and the robust lock. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hami_region.h"

/* Implemented in accounting.c: fixes counters after a lock holder died. */
void hami_region_repair_locked(hami_region *r);

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

uint64_t hami_region_checksum(const hami_region_header *h) {
    /* FNV-1a over every header byte before the checksum field. */
    const unsigned char *p = (const unsigned char *)h;
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < offsetof(hami_region_header, checksum); i++) {
        x ^= p[i];
        x *= 0x100000001b3ULL;
    }
    return x;
}

static int init_lock(pthread_mutex_t *m) {
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (!rc) rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    /* Robust: a holder killed by SIGKILL hands the next locker EOWNERDEAD
     * instead of wedging every process of the allocation. */
    if (!rc) rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!rc) rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

static int fill_region(hami_region_shm *shm, int device_count, const uint64_t *mem, const uint32_t *core) {
    memset(shm, 0, sizeof *shm);
    if (init_lock(&shm->lock) != 0) return -1;
    for (int i = 0; i < HAMI_REGION_MAX_SHARED; i++) shm->shared[i].payer = -1;
    for (int d = 0; d < device_count; d++) {
        shm->dev[d].memory_limit = mem ? mem[d] : 0;
        uint32_t c = core ? core[d] : 0;
        shm->dev[d].core_limit = c;
        if (c > 0 && c < 100) shm->core_limited_mask |= 1u << d;
    }
    hami_region_header *h = &shm->hdr;
    h->magic = HAMI_REGION_MAGIC;
    h->version = HAMI_REGION_VERSION;
    h->header_size = sizeof *h;
    h->total_size = sizeof *shm;
    h->device_count = (uint32_t)device_count;
    h->max_devices = HAMI_REGION_MAX_DEVICES;
    h->max_procs = HAMI_REGION_MAX_PROCS;
    h->checksum = hami_region_checksum(h);
    return 0;
}

int hami_region_validate(const hami_region_shm *shm, size_t file_size, char *err, size_t errlen) {
    const hami_region_header *h = &shm->hdr;
    if (file_size < sizeof *h) {
        set_err(err, errlen, "region is truncated: %zu bytes, the header alone needs %zu", file_size, sizeof *h);
        return HAMI_E_CORRUPT;
    }
    if (h->magic != HAMI_REGION_MAGIC) {
        set_err(err, errlen, "not a hami region (bad magic 0x%016llx)", (unsigned long long)h->magic);
        return HAMI_E_CORRUPT;
    }
    if (h->version != HAMI_REGION_VERSION) {
        set_err(err, errlen, "region version %u, this limiter understands version %u", h->version,
                HAMI_REGION_VERSION);
        return HAMI_E_CORRUPT;
    }
    if (h->checksum != hami_region_checksum(h)) {
        set_err(err, errlen, "region header checksum mismatch (corrupt file)");
        return HAMI_E_CORRUPT;
    }
    if (h->header_size != sizeof *h || h->total_size != sizeof *shm || h->max_devices != HAMI_REGION_MAX_DEVICES ||
        h->max_procs != HAMI_REGION_MAX_PROCS || h->device_count > HAMI_REGION_MAX_DEVICES) {
        set_err(err, errlen, "region layout does not match this build (sizes %u/%llu, devices %u)",
                h->header_size, (unsigned long long)h->total_size, h->device_count);
        return HAMI_E_CORRUPT;
    }
    if (file_size < sizeof *shm) {
        set_err(err, errlen, "region is truncated: %zu of %zu bytes", file_size, sizeof *shm);
        return HAMI_E_CORRUPT;
    }
    for (uint32_t d = 0; d < h->device_count; d++) {
        if (shm->dev[d].core_limit > 100) {
            set_err(err, errlen, "region device %u has core limit %u%% (corrupt)", d, shm->dev[d].core_limit);
            return HAMI_E_CORRUPT;
        }
    }
    return HAMI_OK;
}

/* A process's descriptors are closed in ascending order when it dies.  The
 * region's descriptor carries the liveness lock, so it should close after the
 * driver's (which free the device memory): move it high, where it is closed last. */
static int keep_high(int fd) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 128) return fd;
    rlim_t want = rl.rlim_cur == RLIM_INFINITY ? 1024 : rl.rlim_cur / 2;
    int floor = want > 1024 ? 1024 : (int)want;
    if (fd >= floor) return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0) return fd;
    close(fd);
    return high;
}

int hami_region_check_file(int fd, const char *path, char *err, size_t errlen) {
    /* A region decides how much device memory a workload may take: one that
     * somebody else could write, or a link to somebody else's file, is not
     * trusted.  Root's files are accepted: a node agent usually runs as root. */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "fstat %s: %s", path, strerror(errno));
        return HAMI_E_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s is not a regular file", path);
        return HAMI_E_PERM;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
        set_err(err, errlen, "%s is owned by uid %u, not by this user (uid %u) or root", path, (unsigned)st.st_uid,
                (unsigned)geteuid());
        return HAMI_E_PERM;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        set_err(err, errlen, "%s is writable by group or others (mode %04o; want 0600)", path,
                (unsigned)(st.st_mode & 07777));
        return HAMI_E_PERM;
    }
    return HAMI_OK;
}

int hami_region_check_dir(const char *path, char *err, size_t errlen) {
    /* In a folder others can write to, they could put their own file (or a
     * link) where the region is expected before it is created. */
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    struct stat st;
    if (stat(dir, &st) != 0) {
        set_err(err, errlen, "folder %s of region %s: %s", dir, path, strerror(errno));
        return HAMI_E_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s (folder of region %s) is not a folder", dir, path);
        return HAMI_E_PERM;
    }
    if (st.st_mode & S_IWOTH) {
        set_err(err, errlen, "folder %s of region %s is writable by others (mode %04o)", dir, path,
                (unsigned)(st.st_mode & 07777));
        return HAMI_E_PERM;
    }
    return HAMI_OK;
}

/* Maps the region open on fd; on success the handle owns fd (closed by hami_region_close). */
static int map_fd(int fd, hami_region **out, char *err, size_t errlen) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "fstat: %s", strerror(errno));
        return HAMI_E_IO;
    }
    size_t size = (size_t)st.st_size;
    hami_region_shm head;
    memset(&head, 0, sizeof head);
    /* Validate from a private copy first, so a short file is never mapped past its end. */
    ssize_t got = pread(fd, &head.hdr, sizeof head.hdr, 0);
    if (got < 0) {
        set_err(err, errlen, "read: %s", strerror(errno));
        return HAMI_E_IO;
    }
    (void)got; /* a short read leaves zeros, which the size check below rejects first */
    int rc = hami_region_validate(&head, size, err, errlen);
    if (rc != HAMI_OK) return rc;
    void *p = mmap(NULL, sizeof(hami_region_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        set_err(err, errlen, "mmap: %s", strerror(errno));
        return HAMI_E_IO;
    }
    hami_region_shm *shm = p;
    rc = hami_region_validate(shm, size, err, errlen);
    if (rc != HAMI_OK) {
        munmap(p, sizeof *shm);
        return rc;
    }
    hami_region *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(p, sizeof *shm);
        set_err(err, errlen, "out of host memory");
        return HAMI_E_IO;
    }
    r->shm = shm;
    r->device_count = (int32_t)shm->hdr.device_count;
    r->owns_mapping = 1;
    r->fd = keep_high(fd);
    r->self_slot = -1;
    r->pidns = hami_proc_pidns();
    *out = r;
    return HAMI_OK;
}

int hami_region_open(const char *path, hami_region **out, char *err, size_t errlen) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) {
            set_err(err, errlen, "region %s is a symbolic link (refused)", path);
            return HAMI_E_PERM;
        }
        set_err(err, errlen, "cannot open region %s: %s", path, strerror(e));
        return HAMI_E_IO;
    }
    int rc = hami_region_check_file(fd, path, err, errlen);
    if (rc == HAMI_OK) rc = map_fd(fd, out, err, errlen);
    if (rc != HAMI_OK) close(fd);
    return rc;
}

void hami_region_after_fork_child(hami_region *r) {
    if (!r) return;
    r->self_slot = -1;
    r->pidns = hami_proc_pidns(); /* a parent that unshared its PID namespace forks into the new one */
    if (r->fd < 0) return;
    /* Re-opening through /proc gives a new open file description of the same
     * inode; the inherited one (with the parent's lock) is dropped here, so the
     * parent's death is seen even while this child lives. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", r->fd);
    int fresh = open(self, O_RDWR | O_CLOEXEC);
    close(r->fd);
    r->fd = fresh >= 0 ? keep_high(fresh) : -1;
}

int hami_region_create(const char *path, int device_count, const uint64_t *memory_limits,
                       const uint32_t *core_limits, unsigned flags, hami_region **out, char *err,
                       size_t errlen) {
    if (device_count < 0 || device_count > HAMI_REGION_MAX_DEVICES) {
        set_err(err, errlen, "device count %d outside 0..%d", device_count, HAMI_REGION_MAX_DEVICES);
        return HAMI_E_INVALID;
    }
    for (int d = 0; d < device_count; d++) {
        if (core_limits && core_limits[d] > 100) {
            set_err(err, errlen, "core limit %u%% of device %d is over 100", core_limits[d], d);
            return HAMI_E_INVALID;
        }
    }
    /* Write the complete file under a private name, then publish it in one
     * step: link() when an existing file must win, rename() when replacing.
     * No process can map a half-written region. */
    int checked = hami_region_check_dir(path, err, errlen);
    if (checked != HAMI_OK) return checked;
    char tmp[4096];
    static unsigned counter;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        set_err(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return HAMI_E_IO;
    }
    (void)fchmod(fd, 0600); /* exactly 0600, whatever the umask */
    hami_region_shm *img = calloc(1, sizeof *img);
    int rc = HAMI_E_IO;
    if (!img || fill_region(img, device_count, memory_limits, core_limits) != 0) {
        set_err(err, errlen, "cannot initialise region");
    } else if (pwrite(fd, img, sizeof *img, 0) != (ssize_t)sizeof *img || fsync(fd) != 0) {
        set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        rc = HAMI_OK;
    }
    free(img);
    if (rc == HAMI_OK) {
        if (flags & HAMI_CREATE_REPLACE) {
            if (rename(tmp, path) != 0) {
                set_err(err, errlen, "cannot publish region %s: %s", path, strerror(errno));
                rc = HAMI_E_IO;
            }
        } else if (link(tmp, path) != 0) {
            int e = errno;
            if (e == EEXIST && (flags & HAMI_CREATE_OR_OPEN)) {
                rc = HAMI_E_EXISTS; /* opened below */
            } else {
                set_err(err, errlen, e == EEXIST ? "region %s already exists" : "cannot publish region %s: %s",
                        path, strerror(e));
                rc = e == EEXIST ? HAMI_E_EXISTS : HAMI_E_IO;
            }
        }
    }
    if (rc == HAMI_OK) {
        rc = map_fd(fd, out, err, errlen);
        if (rc == HAMI_OK) fd = -1; /* owned by the region now */
    }
    if (fd >= 0) close(fd);
    unlink(tmp); /* after rename this fails harmlessly; after link it drops the private name */
    if (rc == HAMI_E_EXISTS && (flags & HAMI_CREATE_OR_OPEN)) return hami_region_open(path, out, err, errlen);
    return rc;
}

int hami_region_anonymous(int device_count, const uint64_t *memory_limits, const uint32_t *core_limits,
                          hami_region **out) {
    if (device_count < 0 || device_count > HAMI_REGION_MAX_DEVICES) return HAMI_E_INVALID;
    void *p = mmap(NULL, sizeof(hami_region_shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return HAMI_E_IO;
    if (fill_region(p, device_count, memory_limits, core_limits) != 0) {
        munmap(p, sizeof(hami_region_shm));
        return HAMI_E_IO;
    }
    hami_region *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(p, sizeof(hami_region_shm));
        return HAMI_E_IO;
    }
    r->shm = p;
    r->device_count = device_count;
    r->owns_mapping = 1;
    r->fd = -1;
    r->self_slot = -1;
    r->pidns = hami_proc_pidns();
    *out = r;
    return HAMI_OK;
}

void hami_region_close(hami_region *r) {
    if (!r) return;
    if (r->owns_mapping && r->shm) munmap(r->shm, sizeof(hami_region_shm));
    if (r->fd >= 0) close(r->fd);
    free(r);
}

/* A robust mutex alone can hang for good: its unlock wakes one waiter, and if
 * that waiter is killed before it takes the lock, the others sleep on a free
 * lock that nobody will wake (the kernel's robust-list clean-up covers a dead
 * owner, not a dead wakee).  So every wait is bounded: a waiter wakes at least
 * every LOCK_SLICE_NS and looks at the lock word again.  A lost wake-up then
 * costs one slice, never the process. */
#define LOCK_SLICE_NS 2000000L

static int wait_for_lock(pthread_mutex_t *m) {
    int rc = pthread_mutex_trylock(m);
    while (rc == EBUSY || rc == ETIMEDOUT) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += LOCK_SLICE_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &until);
    }
    return rc;
}

int hami_region_lock(hami_region *r) {
    int rc = wait_for_lock(&r->shm->lock);
    if (rc == EOWNERDEAD) {
        /* The previous holder died inside a critical section: its half-done
         * update is repaired from the slot table before anyone trusts the counters. */
        hami_region_repair_locked(r);
        pthread_mutex_consistent(&r->shm->lock);
        return HAMI_OK;
    }
    return rc == 0 ? HAMI_OK : HAMI_E_LOCK;
}

void hami_region_unlock(hami_region *r) { pthread_mutex_unlock(&r->shm->lock); }
