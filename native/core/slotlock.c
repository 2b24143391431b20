/* Liveness locks: each registered process holds a write lock on one byte of
 * the region file, owned by its open file description (F_OFD_SETLK).  The
 * kernel releases it when the last descriptor of that description closes --
 * when the process dies -- and any process that opens the file can test it,
 * in whatever PID namespace or container it runs.  Open-file-description
 * locks (not POSIX process locks) because a POSIX lock is dropped as soon as
 * the process closes *any* descriptor of the file, e.g. a library reading it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "hami_region.h"

static struct flock byte_of(int slot, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* l_pid must be 0 for OFD locks */
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = HAMI_SLOT_LOCK_BASE + slot;
    fl.l_len = 1;
    return fl;
}

int hami_slot_lock_take(int fd, int slot) {
    if (fd < 0 || slot < 0) return -1;
    struct flock fl = byte_of(slot, F_WRLCK);
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    return errno == EAGAIN || errno == EACCES ? 1 : -1;
}

void hami_slot_lock_drop(int fd, int slot) {
    if (fd < 0 || slot < 0) return;
    struct flock fl = byte_of(slot, F_UNLCK);
    (void)fcntl(fd, F_OFD_SETLK, &fl);
}

int hami_slot_lock_held(int fd, int slot) {
    if (fd < 0 || slot < 0) return -1;
    struct flock fl = byte_of(slot, F_WRLCK);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    /* A lock of this very description does not conflict, so reads as free:
     * callers never ask about their own slot. */
    return fl.l_type != F_UNLCK;
}
