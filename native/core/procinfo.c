/* Process identity: a pid alone is reused by the kernel, so slots also record
 * the start time from /proc/<pid>/stat (field 22, clock ticks since boot). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hami_region.h"

uint64_t hami_proc_start_time(int32_t pid) {
    if (pid <= 0) return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')', so parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    char *save = NULL;
    char *tok = strtok_r(p, " ", &save); /* field 3: state */
    if (!tok || tok[0] == 'Z' || tok[0] == 'X') return 0; /* a zombie holds no device memory */
    for (int field = 4; field <= 22; field++) {
        tok = strtok_r(NULL, " ", &save);
        if (!tok) return 0;
    }
    uint64_t v = strtoull(tok, NULL, 10);
    return v ? v : 1; /* 0 means "no such process"; a start at tick 0 is not distinguishable otherwise */
}

int hami_proc_alive(int32_t pid, uint64_t start_time) {
    uint64_t now = hami_proc_start_time(pid);
    return now != 0 && now == start_time;
}

uint64_t hami_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
