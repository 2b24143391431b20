/* The Example Runtime: bookkeeping of device memory per device (see exrt.h). */
#include "exrt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

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

static uint64_t capacity(void) {
    const char *mib = getenv("EXRT_MEMORY_MIB");
    return (mib && *mib ? strtoull(mib, NULL, 10) : (uint64_t)1 << 20) * MIB;
}

EXRT_EXPORT exrtError exrtSetDevice(int device) {
    if (device < 0 || device >= MAX_DEVICES) return EXRT_ERROR_INVALID;
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
    pthread_mutex_lock(&lock);
    *total_bytes = (size_t)capacity();
    *free_bytes = (size_t)(capacity() - used[current]);
    pthread_mutex_unlock(&lock);
    return EXRT_SUCCESS;
}
