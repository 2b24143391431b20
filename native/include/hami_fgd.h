/* FGD fragmentation rises for the fragmentation-aware policy (native/scheduling/fgd.c). */
#ifndef HAMI_FGD_H
#define HAMI_FGD_H

#include <stdint.h>

#define HAMI_FGD_MILLI 1000
#define HAMI_FGD_MAX_SHAPES 512

/* Arrays are C-contiguous; N nodes, G slots per node, S shapes. */
typedef struct hami_fgd_state {
    int64_t slots;            /* G */
    int64_t shapes;           /* S, at most HAMI_FGD_MAX_SHAPES */
    const int64_t *need;      /* [N, G, S] thousandths shape s needs on the slot (a huge value: never) */
    const int64_t *need_class;/* [N, G] slots with equal needs for every shape share a class */
    const int64_t *free;      /* [N, G] free thousandths per slot */
    const int64_t *count_ge;  /* [N, S] slots with at least the shape's need free */
    const int64_t *small;     /* [N, S] free thousandths on the other slots */
    const int64_t *total;     /* [N] free thousandths of the node */
    const int64_t *cpu_free;  /* [N] host millicores free */
    const int64_t *mem_free;  /* [N] host MiB free */
    const double *base;       /* [N] the node's fragmentation now */
    const int64_t *shape_cpu; /* [S] */
    const int64_t *shape_mem; /* [S] */
    const int64_t *shape_num; /* [S] devices the shape takes (0: none) */
    const double *weight;     /* [S] frequencies, summing to 1 */
    int32_t check_memory;     /* a shape also needs its host memory to fit */
    int32_t cpu_only_all_idle;
    /* Expected end waste (hami_devices/scheduling/fgd.py gap_waste, gap_feed), per slot class c and gap g at
     * [c * (HAMI_FGD_MILLI + 1) + g]: a gap ends with waste[], or with all of it where the host's free CPU or
     * memory is below feed_cpu[] / feed_mem[] (the least a shape that fits the gap asks). */
    const double *waste;
    const int64_t *feed_cpu;
    const int64_t *feed_mem;
    const double *end_waste;  /* [N] the node's end waste now */
} hami_fgd_state;

/* out[i]: the rise of the fragmentation of node[i] when its slot slot[i] gives take[i] thousandths
 * to a task that also takes cpu millicores and mem MiB of the host (infinity where it cannot).
 * Rows of one node with the same need class, free share and take rise alike: consecutive rows of a
 * node are computed once per such group. */
void hami_fgd_share(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                    const int64_t *take, int64_t cpu, int64_t mem, double *out);

/* out[i]: the rise when the first count entirely free slots of node[i] are taken whole (0: none). */
void hami_fgd_whole(const hami_fgd_state *st, int64_t k, const int64_t *node, int64_t count, int64_t cpu,
                    int64_t mem, double *out);

/* out[i]: the rise of node[i]'s end waste when its slot slot[i] is left with left[i] free and the host
 * gives cpu millicores and mem MiB (every gap of the node is judged against the host share left). */
void hami_fgd_end_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                        const int64_t *left, int64_t cpu, int64_t mem, double *out);

/* out[i]: node[i]'s end waste now. */
void hami_fgd_node_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, double *out);

#endif
