/* The Example Runtime: bookkeeping of device memory per device, and faults on demand (see exrt.h). */
#define _GNU_SOURCE
#include "exrt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXRT_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16
#define MAX_BLOCKS 4096
#define MIB ((uint64_t)1 << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int current;
static uint64_t used[MAX_DEVICES];
static struct {
    uintptr_t address; /* 0: free entry */
    size_t bytes;
    int device;
} blocks[MAX_BLOCKS];
static uintptr_t next_address = 0x100000;

/* -- faults: the $EXRT_FAULTS control file ------------------------------------------------- */

enum fault { FAULT_NONE, FAULT_UNHEALTHY, FAULT_ERROR, FAULT_LOST }; /* graver later */
#define MAX_FAULTS 64

static pthread_mutex_t faults_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    enum fault kind;
    int device; /* -1: every device ("*") */
    char call[64]; /* empty: every call */
} faults[MAX_FAULTS];
static int fault_count;
static char faults_path[4096];
static struct stat faults_seen; /* the file as last read; a rewritten or replaced file differs */

static enum fault fault_named(const char *word) {
    if (!strcmp(word, "unhealthy")) return FAULT_UNHEALTHY;
    if (!strcmp(word, "error")) return FAULT_ERROR;
    if (!strcmp(word, "lost")) return FAULT_LOST;
    return FAULT_NONE;
}

/* Re-read the control file only when it changed: every call about a device comes here. Holds faults_lock. */
static void load_faults(const char *path) {
    struct stat now;
    if (stat(path, &now) != 0) {
        fault_count = 0;
        faults_path[0] = '\0';
        return;
    }
    if (!strcmp(path, faults_path) && now.st_ino == faults_seen.st_ino && now.st_dev == faults_seen.st_dev &&
        now.st_size == faults_seen.st_size && now.st_mtim.tv_sec == faults_seen.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == faults_seen.st_mtim.tv_nsec)
        return;
    fault_count = 0;
    faults_path[0] = '\0';
    FILE *file = fopen(path, "r");
    if (!file) return;
    char line[256];
    while (fault_count < MAX_FAULTS && fgets(line, sizeof line, file)) {
        char *comment = strchr(line, '#');
        if (comment) *comment = '\0';
        char word[16], device[32], call[64] = "";
        if (sscanf(line, "%15s %31s %63s", word, device, call) < 2) continue;
        enum fault kind = fault_named(word);
        char *end;
        long ordinal = strtol(device, &end, 10);
        int every = !strcmp(device, "*");
        if (kind == FAULT_NONE || (!every && (*end || ordinal < 0 || ordinal >= MAX_DEVICES))) continue;
        faults[fault_count].kind = kind;
        faults[fault_count].device = every ? -1 : (int)ordinal;
        snprintf(faults[fault_count].call, sizeof faults[fault_count].call, "%s", kind == FAULT_ERROR ? call : "");
        fault_count++;
    }
    fclose(file);
    snprintf(faults_path, sizeof faults_path, "%s", path);
    faults_seen = now;
}

/* The gravest fault a call named `call` about `device` meets now. */
static enum fault fault_of(int device, const char *call) {
    const char *path = getenv("EXRT_FAULTS");
    if (!path || !*path) return FAULT_NONE;
    enum fault worst = FAULT_NONE;
    pthread_mutex_lock(&faults_lock);
    load_faults(path);
    for (int i = 0; i < fault_count; i++) {
        if (faults[i].device != -1 && faults[i].device != device) continue;
        if (faults[i].call[0] && strcmp(faults[i].call, call)) continue;
        if (faults[i].kind > worst) worst = faults[i].kind;
    }
    pthread_mutex_unlock(&faults_lock);
    return worst;
}

/* What a call fails with under a fault, EXRT_SUCCESS when it goes on (a bad health lets calls work). */
static exrtError fault_error(int device, const char *call) {
    switch (fault_of(device, call)) {
    case FAULT_LOST: return EXRT_ERROR_DEVICE_LOST;
    case FAULT_ERROR: return EXRT_ERROR_UNKNOWN;
    default: return EXRT_SUCCESS;
    }
}

/* -- memory ----------------------------------------------------------------------------------- */

static uint64_t capacity(void) {
    const char *mib = getenv("EXRT_MEMORY_MIB");
    return (mib && *mib ? strtoull(mib, NULL, 10) : (uint64_t)1 << 20) * MIB;
}

EXRT_EXPORT exrtError exrtSetDevice(int device) {
    if (device < 0 || device >= MAX_DEVICES) return EXRT_ERROR_INVALID;
    exrtError fault = fault_error(device, "exrtSetDevice");
    if (fault) return fault;
    current = device;
    return EXRT_SUCCESS;
}

EXRT_EXPORT exrtError exrtGetDevice(int *device) {
    if (!device) return EXRT_ERROR_INVALID;
    *device = current;
    return EXRT_SUCCESS;
}

EXRT_EXPORT exrtError exrtMalloc(void **ptr, size_t bytes) {
    if (!ptr || !bytes) return EXRT_ERROR_INVALID;
    exrtError fault = fault_error(current, "exrtMalloc");
    if (fault) return fault;
    exrtError rc = EXRT_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (used[current] + bytes <= capacity()) {
        for (int i = 0; i < MAX_BLOCKS; i++) {
            if (blocks[i].address) continue;
            blocks[i].address = next_address;
            blocks[i].bytes = bytes;
            blocks[i].device = current;
            next_address += (bytes + 0xfff) & ~(size_t)0xfff;
            used[current] += bytes;
            *ptr = (void *)blocks[i].address;
            rc = EXRT_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXRT_EXPORT exrtError exrtFree(void *ptr) {
    exrtError rc = EXRT_ERROR_INVALID;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_BLOCKS; i++) {
        if (blocks[i].address != (uintptr_t)ptr || !ptr) continue;
        used[blocks[i].device] -= blocks[i].bytes;
        blocks[i].address = 0;
        rc = EXRT_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXRT_EXPORT exrtError exrtMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return EXRT_ERROR_INVALID;
    exrtError fault = fault_error(current, "exrtMemGetInfo");
    if (fault) return fault;
    pthread_mutex_lock(&lock);
    *total_bytes = (size_t)capacity();
    *free_bytes = (size_t)(capacity() - used[current]);
    pthread_mutex_unlock(&lock);
    return EXRT_SUCCESS;
}

EXRT_EXPORT exrtError exrtDeviceGetHealth(int device, int *healthy) {
    if (device < 0 || device >= MAX_DEVICES || !healthy) return EXRT_ERROR_INVALID;
    exrtError fault = fault_error(device, "exrtDeviceGetHealth");
    if (fault) return fault;
    *healthy = fault_of(device, "exrtDeviceGetHealth") != FAULT_UNHEALTHY;
    return EXRT_SUCCESS;
}
