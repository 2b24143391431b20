/* The per-user default region.  With only limits in the environment (HAMi-core's
 * CUDA_DEVICE_MEMORY_LIMIT), each process gets a private region: its own limit,
 * and a fork/exec child another one.  HAMI_REGION_PATH=user names one region per
 * user instead, shared by every process of that user that asks for it -- children
 * included -- as HAMi-core's default cache file is.  It lives where the SDK keeps
 * regions: $HAMI_REGION_DIR, else $XDG_RUNTIME_DIR/hami-devices/regions, else
 * <tmp>/hami-devices-<uid>/regions, in a folder made 0700 and checked as the SDK
 * checks its own (this user's or root's, writable by nobody else). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim_core.h"

static int make_dir(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a folder", dir);
        return -1;
    }
    if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & S_IWOTH)) {
        snprintf(err, errlen, "%s is not this user's, or others can write to it", dir);
        return -1;
    }
    return 0;
}

int hami_user_region_path(char *path, size_t len, char *err, size_t errlen) {
    char dir[3072];
    const char *explicit = getenv("HAMI_REGION_DIR"), *runtime = getenv("XDG_RUNTIME_DIR");
    if (explicit && *explicit) {
        snprintf(dir, sizeof dir, "%s", explicit);
    } else {
        char parent[2048];
        if (runtime && *runtime) {
            snprintf(parent, sizeof parent, "%s/hami-devices", runtime);
        } else {
            const char *tmp = getenv("TMPDIR");
            snprintf(parent, sizeof parent, "%s/hami-devices-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)geteuid());
        }
        if (make_dir(parent, err, errlen) != 0) return -1;
        snprintf(dir, sizeof dir, "%s/regions", parent);
    }
    if (make_dir(dir, err, errlen) != 0) return -1;
    snprintf(path, len, "%s/user-default.region", dir);
    return 0;
}
