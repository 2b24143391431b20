/* VMM shareable handles in the fake driver, on CUDA's semantics: an exported
 * allocation's physical memory lives while any process -- the exporter or an
 * importer -- holds a handle to it or a mapping of it, and is freed with the
 * last one, whoever that is, and when its holders die.
 *
 * An exported allocation leaves its creator's per-process count for a table
 * shared by every process of the fake device (a file beside $HAMI_FAKE_GPU_STATE,
 * or process-local without one).  Each process holding it keeps an open-file-
 * description lock on one byte of the entry's range (its fake process slot), so
 * the memory stays counted exactly while some holder -- alive, or not yet torn
 * down -- keeps that lock.  The POSIX file descriptor handed out is a memfd
 * naming the entry. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

#define ENTRIES 128
#define SHARE_MAGIC 0x31454c4241524853ULL /* "SHARABLE1"-ish, little-endian */
#define LOCK_BASE (1LL << 32)

typedef struct {
    uint64_t id;
    int32_t state; /* 0 free, 1 live, 2 being freed */
    int32_t device;
    uint64_t size;
} share_entry;

typedef struct {
    uint64_t magic; /* SHARE_MAGIC once initialised for the state file created at `state` */
    uint64_t state;
    share_entry e[ENTRIES];
} share_table;

typedef struct {
    uint64_t magic, id;
    int32_t entry, pad;
} share_token; /* the contents of an exported handle's memfd */

static share_table *g_table;
static int g_fd = -1;
static int g_holds[ENTRIES]; /* this process's handles and mappings of each entry (atomic) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void reopen_in_child(void) {
    if (g_fd >= 0) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", g_fd);
        int fresh = open(self, O_RDWR | O_CLOEXEC);
        close(g_fd);
        g_fd = fresh;
    }
    memset(g_holds, 0, sizeof g_holds); /* a child holds none of its parent's handles */
}

static void attach(void) {
    const char *state = getenv("HAMI_FAKE_GPU_STATE");
    void *p = MAP_FAILED;
    if (state && *state) {
        char path[4096];
        snprintf(path, sizeof path, "%s.vmm", state);
        uint64_t stamp = fake_state_stamp();
        g_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (g_fd >= 0 && ftruncate(g_fd, sizeof(share_table)) == 0) {
            p = mmap(NULL, sizeof(share_table), PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
            share_table *t = p;
            /* A table left from an earlier state file of that name describes memory this one never had. */
            if (p != MAP_FAILED && (t->magic != SHARE_MAGIC || t->state != stamp)) {
                memset(t->e, 0, sizeof t->e);
                t->state = stamp;
                __atomic_store_n(&t->magic, SHARE_MAGIC, __ATOMIC_RELEASE);
            }
        }
    } else {
        p = mmap(NULL, sizeof(share_table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) return;
    g_table = p;
    pthread_atfork(NULL, NULL, reopen_in_child);
}

static int ready(void) {
    pthread_once(&g_once, attach);
    return g_table != NULL;
}

static struct flock byte_lock(int entry, int device, short type, off_t len) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = LOCK_BASE + (off_t)entry * HAMI_FAKE_GPU_MAX_PROCS;
    if (len == 1) fl.l_start += fake_proc_of(device) - fake_state_of(device)->procs;
    fl.l_len = len;
    return fl;
}

/* Whether any process other than this one still holds the entry. */
static int held_elsewhere(int entry, int device) {
    if (g_fd < 0) return 0;
    struct flock fl = byte_lock(entry, device, F_WRLCK, HAMI_FAKE_GPU_MAX_PROCS);
    if (fcntl(g_fd, F_OFD_GETLK, &fl) != 0) return 1; /* cannot tell: keep the memory */
    return fl.l_type != F_UNLCK;
}

static void hold(int entry, int device) {
    if (__atomic_fetch_add(&g_holds[entry], 1, __ATOMIC_ACQ_REL) == 0 && g_fd >= 0) {
        struct flock fl = byte_lock(entry, device, F_WRLCK, 1);
        (void)fcntl(g_fd, F_OFD_SETLK, &fl);
    }
}

/* Frees the entry's memory when nobody holds it: claimed (1 -> 2) first, then
 * checked again, so that a process importing meanwhile keeps it. */
static void free_if_unheld(int entry) {
    share_entry *e = &g_table->e[entry];
    int device = e->device;
    if (__atomic_load_n(&g_holds[entry], __ATOMIC_ACQUIRE) || __atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != 1 ||
        held_elsewhere(entry, device))
        return;
    int live = 1;
    if (!__atomic_compare_exchange_n(&e->state, &live, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    if (held_elsewhere(entry, device)) {
        __atomic_store_n(&e->state, 1, __ATOMIC_RELEASE);
        return;
    }
    fake_give_unowned(device, e->size);
    e->id = 0;
    __atomic_store_n(&e->state, 0, __ATOMIC_RELEASE);
}

static void unhold(int entry) {
    if (__atomic_sub_fetch(&g_holds[entry], 1, __ATOMIC_ACQ_REL) > 0) return;
    if (g_fd >= 0) {
        struct flock fl = byte_lock(entry, g_table->e[entry].device, F_UNLCK, 1);
        (void)fcntl(g_fd, F_OFD_SETLK, &fl);
    }
    free_if_unheld(entry);
}

void fake_share_drop(int entry) { unhold(entry); }

/* Frees entries whose holders are all gone (a driver frees a dead process's references). */
void fake_share_reap(void) {
    if (!__atomic_load_n(&g_table, __ATOMIC_ACQUIRE)) return; /* nothing was ever exported or imported here */
    for (int i = 0; i < ENTRIES; i++)
        if (__atomic_load_n(&g_table->e[i].state, __ATOMIC_ACQUIRE) == 1) free_if_unheld(i);
}

/* Makes a local allocation shared; returns its entry or -1. */
int fake_share_export(int device, uint64_t size, uint64_t *id_out) {
    if (!ready()) return -1;
    static uint64_t counter;
    for (int i = 0; i < ENTRIES; i++) {
        share_entry *e = &g_table->e[i];
        int32_t free_state = 0;
        if (!__atomic_compare_exchange_n(&e->state, &free_state, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        e->id = hami_fake_now_ns() ^ ((uint64_t)getpid() << 32) ^ ++counter;
        e->device = device;
        e->size = size;
        hold(i, device);
        /* The memory now belongs to the entry, not to this process's count. */
        fake_disown(device, size);
        __atomic_store_n(&e->state, 1, __ATOMIC_RELEASE);
        *id_out = e->id;
        return i;
    }
    return -1;
}

int fake_share_token_fd(int entry, uint64_t id) {
    int fd = memfd_create("fake-cuda-shareable", MFD_CLOEXEC);
    share_token t = {SHARE_MAGIC, id, entry, 0};
    if (fd >= 0 && pwrite(fd, &t, sizeof t, 0) != (ssize_t)sizeof t) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* This process takes a reference to the entry named by fd; returns the entry or -1. */
int fake_share_import(int fd, uint64_t *size, int *device) {
    share_token t;
    if (!ready() || pread(fd, &t, sizeof t, 0) != (ssize_t)sizeof t || t.magic != SHARE_MAGIC || t.entry < 0 ||
        t.entry >= ENTRIES)
        return -1;
    share_entry *e = &g_table->e[t.entry];
    if (!fake_valid_dev(e->device)) return -1;
    hold(t.entry, e->device);
    while (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) == 2) sched_yield(); /* being freed or exported */
    if (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != 1 || e->id != t.id) {
        if (__atomic_sub_fetch(&g_holds[t.entry], 1, __ATOMIC_ACQ_REL) == 0 && g_fd >= 0) {
            struct flock fl = byte_lock(t.entry, e->device, F_UNLCK, 1);
            (void)fcntl(g_fd, F_OFD_SETLK, &fl);
        }
        return -1;
    }
    *size = e->size;
    *device = e->device;
    return t.entry;
}
