/* Process identity: a pid alone is reused by the kernel, so slots also record
 * the start time from /proc/<pid>/stat (field 22, clock ticks since boot) and
 * the PID namespace the pid is numbered in. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hami_region.h"

/* 1: *out holds the start time and *state the state letter; 0: no such process;
 * -1: cannot tell (out of file descriptors or memory, ...). */
static int read_stat(const char *path, uint64_t *out, char *state) {
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n < 0) return e == ESRCH ? 0 : -1; /* ESRCH: it exited after the open */
    if (n == 0) return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')', so parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    p++;
    char *save = NULL;
    char *tok = strtok_r(p, " ", &save); /* field 3: state */
    if (!tok) return -1;
    *state = tok[0];
    for (int field = 4; field <= 22; field++) {
        tok = strtok_r(NULL, " ", &save);
        if (!tok) return -1;
    }
    uint64_t v = strtoull(tok, NULL, 10);
    *out = v ? v : 1; /* 0 means "no such process"; a start at tick 0 is not distinguishable otherwise */
    return 1;
}

static int finished(char state) { return state == 'Z' || state == 'X'; }

/* A thread group leader turns zombie as soon as *it* exits, while its other
 * threads may still be tearing the process down -- holding its files, device
 * nodes included, whose release is what frees device memory.  Only when every
 * thread is gone or a zombie has the whole process finished.  1: some thread
 * is still exiting (or cannot be read). */
static int threads_still_exiting(int32_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir) return errno == ENOENT || errno == ESRCH ? 0 : 1;
    int busy = 0;
    struct dirent *e;
    while (!busy && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char stat_path[320];
        snprintf(stat_path, sizeof stat_path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        uint64_t start = 0;
        char state = 0;
        int rc = read_stat(stat_path, &start, &state);
        busy = rc < 0 || (rc == 1 && !finished(state));
    }
    closedir(dir);
    return busy;
}

/* 1: *out holds the start time of a process that still exists and has not
 * finished exiting; 0: no such process, or it has finished (it holds no
 * device memory); -1: cannot tell. */
static int read_start_time(int32_t pid, uint64_t *out) {
    if (pid <= 0) return 0;
    char path[64];
    char state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int rc = read_stat(path, out, &state);
    if (rc == 1 && finished(state) && !threads_still_exiting(pid)) return 0;
    return rc;
}

uint64_t hami_proc_pidns(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The first NSpid entry: the pid as the namespace of the /proc mount numbers it
 * (the host's pid when a container shares the host's /proc, else its own). */
static int32_t read_nspid(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *line = strstr(buf, "\nNSpid:");
    return line ? (int32_t)strtol(line + 7, NULL, 10) : 0;
}

int hami_proc_self(hami_proc_identity *out) {
    /* /proc/self, never /proc/<getpid()>: inside a PID namespace that shares
     * the host's /proc, getpid() numbers a different (host) process there. */
    memset(out, 0, sizeof *out);
    out->pid = (int32_t)getpid();
    out->pidns = hami_proc_pidns();
    out->host_pid = read_nspid();
    if (out->host_pid <= 0) out->host_pid = out->pid;
    char state = 0;
    return read_stat("/proc/self/stat", &out->start_time, &state) == 1 ? 0 : -1;
}

uint64_t hami_proc_start_time(int32_t pid) {
    uint64_t v = 0;
    return read_start_time(pid, &v) == 1 ? v : 0;
}

int hami_proc_alive(int32_t pid, uint64_t start_time) {
    /* Dead only on evidence: a /proc read that fails for want of descriptors or
     * memory must not hand a live process's reservations to others. */
    uint64_t now = 0;
    int rc = read_start_time(pid, &now);
    if (rc < 0) return 1;
    /* 0: its own read failed at registration; then only a pid gone or a zombie is dead. */
    return rc == 1 && (start_time == 0 || now == start_time);
}

uint64_t hami_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
