#include "ptrmap.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t mix(uint64_t k) {
    /* Device addresses are aligned, so the low bits carry little: mix them in. */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

int hami_ptrmap_put(hami_ptrmap *m, uint64_t key, uint64_t size, int32_t device) {
    hami_ptrmap_node *n = malloc(sizeof *n);
    if (!n) return -1;
    uint64_t h = mix(key);
    hami_ptrmap_shard *s = &m->shards[h % HAMI_PTRMAP_SHARDS];
    n->key = key;
    n->size = size;
    n->device = device;
    pthread_mutex_lock(&s->mu);
    hami_ptrmap_node **b = &s->buckets[(h / HAMI_PTRMAP_SHARDS) % HAMI_PTRMAP_BUCKETS];
    n->next = *b;
    *b = n;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int hami_ptrmap_take(hami_ptrmap *m, uint64_t key, uint64_t *size, int32_t *device) {
    uint64_t h = mix(key);
    hami_ptrmap_shard *s = &m->shards[h % HAMI_PTRMAP_SHARDS];
    pthread_mutex_lock(&s->mu);
    hami_ptrmap_node **pp = &s->buckets[(h / HAMI_PTRMAP_SHARDS) % HAMI_PTRMAP_BUCKETS];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->key == key) {
            hami_ptrmap_node *n = *pp;
            *pp = n->next;
            pthread_mutex_unlock(&s->mu);
            *size = n->size;
            *device = n->device;
            free(n);
            return 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return -1;
}

void hami_ptrmap_after_fork(hami_ptrmap *m) {
    /* Another thread may have held a shard lock at fork(); the child starts
     * with fresh locks (device memory does not survive fork anyway). */
    for (int i = 0; i < HAMI_PTRMAP_SHARDS; i++) pthread_mutex_init(&m->shards[i].mu, NULL);
}
