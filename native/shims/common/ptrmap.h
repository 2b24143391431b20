/* Process-local map from a device address (or allocation handle) to the size
 * and device it was accounted under, so free() can give back exactly what
 * alloc() reserved.  Sharded so that threads allocating at once rarely meet. */
#ifndef HAMI_PTRMAP_H
#define HAMI_PTRMAP_H

#include <pthread.h>
#include <stdint.h>

#define HAMI_PTRMAP_SHARDS 64
#define HAMI_PTRMAP_BUCKETS 256

typedef struct hami_ptrmap_node {
    uint64_t key;
    uint64_t size;
    int32_t device;
    struct hami_ptrmap_node *next;
} hami_ptrmap_node;

typedef struct hami_ptrmap_shard {
    pthread_mutex_t mu;
    hami_ptrmap_node *buckets[HAMI_PTRMAP_BUCKETS];
} hami_ptrmap_shard;

typedef struct hami_ptrmap {
    hami_ptrmap_shard shards[HAMI_PTRMAP_SHARDS];
} hami_ptrmap;

/* A zero-filled (static) map is ready to use: PTHREAD_MUTEX_INITIALIZER is all zeros on glibc. */
int hami_ptrmap_put(hami_ptrmap *m, uint64_t key, uint64_t size, int32_t device);
int hami_ptrmap_take(hami_ptrmap *m, uint64_t key, uint64_t *size, int32_t *device);
void hami_ptrmap_after_fork(hami_ptrmap *m);

#endif
