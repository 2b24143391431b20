/* The rise of FGD's node fragmentation when a task is placed: the inner loop of the
 * fragmentation-aware policy (hami_devices/scheduling/fragindex.py), over candidate devices x
 * typical shapes.  The same arithmetic as hami_devices/scheduling/fgd.py (share_deltas,
 * whole_deltas), which the tests hold it identical to; here because numpy's temporaries cost
 * ten times the arithmetic at the scale of one decision (thousands of devices x dozens of shapes).
 * Below them, each node's expected end waste, summed over its gaps from tables fgd.py builds
 * (gap_waste, gap_feed): in numpy the per-node sums cost four times as much a decision. */
#include <math.h>
#include <stdint.h>

#include "hami_fgd.h"

static double node_frag(const hami_fgd_state *st, int64_t n, const int64_t *count_ge, const int64_t *small,
                        int64_t total, int64_t cpu_left, int64_t mem_left) {
    double f = 0.0;
    for (int64_t s = 0; s < st->shapes; s++) {
        int64_t num = st->shape_num[s];
        int fits = cpu_left >= st->shape_cpu[s] && (num == 0 || count_ge[s] >= num);
        if (st->check_memory) fits = fits && mem_left >= st->shape_mem[s];
        if (st->cpu_only_all_idle) fits = fits && num > 0;
        f += st->weight[s] * (double)(fits ? small[s] : total);
    }
    (void)n;
    return f;
}

#define SAME_NODE_MEMO 16

void hami_fgd_share(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                    const int64_t *take, int64_t cpu, int64_t mem, double *out) {
    const int64_t S = st->shapes, G = st->slots;
    /* what the current node's rows gave, by (need class, free, take) */
    int64_t memo_key[SAME_NODE_MEMO][3];
    double memo_value[SAME_NODE_MEMO];
    int memo_size = 0;
    int64_t memo_node = -1;
    for (int64_t i = 0; i < k; i++) {
        int64_t n = node[i], g = slot[i], t = take[i];
        int64_t f = st->free[n * G + g], a = f - t, cls = st->need_class[n * G + g];
        if (a < 0) {
            out[i] = INFINITY;
            continue;
        }
        if (n != memo_node) {
            memo_node = n;
            memo_size = 0;
        }
        int hit = -1;
        for (int m = 0; m < memo_size; m++) {
            if (memo_key[m][0] == cls && memo_key[m][1] == f && memo_key[m][2] == t) {
                hit = m;
                break;
            }
        }
        if (hit >= 0) {
            out[i] = memo_value[hit];
            continue;
        }
        const int64_t *need = st->need + (n * G + g) * S;
        const int64_t *cge = st->count_ge + n * S, *sml = st->small + n * S;
        int64_t total = st->total[n] - t, cpu_left = st->cpu_free[n] - cpu, mem_left = st->mem_free[n] - mem;
        double f_new = 0.0;
        for (int64_t s = 0; s < S; s++) {
            int64_t d = need[s];
            int ge_old = f >= d, ge_new = a >= d;
            int64_t count = cge[s] - ge_old + ge_new;
            int64_t small = sml[s] - (ge_old ? 0 : f) + (ge_new ? 0 : a);
            int64_t num = st->shape_num[s];
            int fits = cpu_left >= st->shape_cpu[s] && (num == 0 || count >= num);
            if (st->check_memory) fits = fits && mem_left >= st->shape_mem[s];
            if (st->cpu_only_all_idle) fits = fits && num > 0;
            f_new += st->weight[s] * (double)(fits ? small : total);
        }
        out[i] = f_new - st->base[n];
        if (memo_size < SAME_NODE_MEMO) {
            memo_key[memo_size][0] = cls;
            memo_key[memo_size][1] = f;
            memo_key[memo_size][2] = t;
            memo_value[memo_size++] = out[i];
        }
    }
}

void hami_fgd_whole(const hami_fgd_state *st, int64_t k, const int64_t *node, int64_t count, int64_t cpu,
                    int64_t mem, double *out) {
    const int64_t S = st->shapes, G = st->slots;
    int64_t lost[HAMI_FGD_MAX_SHAPES], small_lost[HAMI_FGD_MAX_SHAPES], cge[HAMI_FGD_MAX_SHAPES],
        sml[HAMI_FGD_MAX_SHAPES];
    for (int64_t i = 0; i < k; i++) {
        int64_t n = node[i];
        for (int64_t s = 0; s < S; s++) lost[s] = small_lost[s] = 0;
        int64_t taken = 0;
        for (int64_t g = 0; g < G && taken < count; g++) {
            if (st->free[n * G + g] < HAMI_FGD_MILLI) continue;
            taken++;
            const int64_t *need = st->need + (n * G + g) * S;
            for (int64_t s = 0; s < S; s++) {
                if (need[s] <= HAMI_FGD_MILLI)
                    lost[s]++;
                else
                    small_lost[s] += HAMI_FGD_MILLI;
            }
        }
        for (int64_t s = 0; s < S; s++) {
            cge[s] = st->count_ge[n * S + s] - lost[s];
            sml[s] = st->small[n * S + s] - small_lost[s];
        }
        int64_t total = st->total[n] - HAMI_FGD_MILLI * count;
        out[i] = node_frag(st, n, cge, sml, total, st->cpu_free[n] - cpu, st->mem_free[n] - mem) - st->base[n];
    }
}

static double gap_end_waste(const hami_fgd_state *st, int64_t class_id, int64_t gap, int64_t cpu_left,
                            int64_t mem_left) {
    /* A slot's free share is within one device; clamped so a bad value never reads outside its class's row. */
    if (gap < 0) gap = 0;
    if (gap > HAMI_FGD_MILLI) gap = HAMI_FGD_MILLI;
    int64_t i = class_id * (HAMI_FGD_MILLI + 1) + gap;
    if (cpu_left < st->feed_cpu[i] || mem_left < st->feed_mem[i]) return (double)gap; /* nothing can fill it */
    return st->waste[i];
}

/* The node's end waste with slot `slot` (-1: none) left with `left` free and the host share given. */
static double node_end_waste(const hami_fgd_state *st, int64_t n, int64_t slot, int64_t left, int64_t cpu,
                             int64_t mem) {
    const int64_t G = st->slots;
    const int64_t cpu_left = st->cpu_free[n] - cpu, mem_left = st->mem_free[n] - mem;
    const int64_t *free = st->free + n * G, *class_id = st->need_class + n * G;
    double sum = 0.0;
    for (int64_t g = 0; g < G; g++)
        sum += gap_end_waste(st, class_id[g], g == slot ? left : free[g], cpu_left, mem_left);
    return sum;
}

void hami_fgd_end_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                        const int64_t *left, int64_t cpu, int64_t mem, double *out) {
    for (int64_t i = 0; i < k; i++)
        out[i] = node_end_waste(st, node[i], slot[i], left[i], cpu, mem) - st->end_waste[node[i]];
}

void hami_fgd_node_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, double *out) {
    for (int64_t i = 0; i < k; i++) out[i] = node_end_waste(st, node[i], -1, 0, 0, 0);
}
