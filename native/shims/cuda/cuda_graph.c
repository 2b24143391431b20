/* Graph memory nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync captured
 * into a graph).  Their physical memory is taken when the graph is launched,
 * from a per-device graph allocator that keeps it cached after the launch
 * and after the executable graph is destroyed, until cuDeviceGraphMemTrim.
 *
 * So an executable graph is charged, per device, the sum of its allocation
 * nodes -- the most its launches can hold -- when it is instantiated, and
 * instantiation is refused with CUDA_ERROR_OUT_OF_MEMORY past the limit.
 * When it is destroyed its charge moves to the device's "cached" charge,
 * which is lowered to what the graph allocator still reserves
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) after each synchronisation, and
 * trimmed (cuDeviceGraphMemTrim) when the limit refuses something.  The
 * memory of live graphs, launched or not, stays charged while they exist. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"

#define NDEV HAMI_REGION_MAX_DEVICES

typedef struct graph_exec {
    CUgraphExec exec;
    uint64_t bytes[NDEV];
    struct graph_exec *next;
} graph_exec;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static graph_exec *g_execs;
static uint64_t g_live[NDEV], g_cached[NDEV];
static int g_any; /* a graph with memory nodes was ever instantiated: the sync hooks have work */

/* Bytes of the graph's allocation nodes per device; 0 when it has none.  (Child and conditional
 * graphs cannot hold memory nodes, so the top level is all there is.) */
static int footprint(CUgraph graph, uint64_t bytes[NDEV]) {
    memset(bytes, 0, NDEV * sizeof bytes[0]);
    if (!hami_real.cuGraphGetNodes || !hami_real.cuGraphNodeGetType || !hami_real.cuGraphMemAllocNodeGetParams)
        return 0;
    size_t n = 0;
    if (hami_real.cuGraphGetNodes(graph, NULL, &n) != CUDA_SUCCESS || n == 0) return 0;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    if (!nodes) return -1;
    int any = 0;
    if (hami_real.cuGraphGetNodes(graph, nodes, &n) == CUDA_SUCCESS) {
        for (size_t i = 0; i < n; i++) {
            CUgraphNodeType type;
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            if (!nodes[i] || hami_real.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS ||
                type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
                continue;
            memset(&p, 0, sizeof p);
            if (hami_real.cuGraphMemAllocNodeGetParams(nodes[i], &p) != CUDA_SUCCESS) continue;
            if (p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;
            int dev = p.poolProps.location.id;
            if (dev < 0 || dev >= NDEV) continue;
            bytes[dev] += p.bytesize;
            any = 1;
        }
    }
    free(nodes);
    return any;
}

static void release_all(const uint64_t bytes[NDEV]) {
    for (int d = 0; d < NDEV; d++)
        if (bytes[d]) hami_shim_release(d, bytes[d]);
}

typedef CUresult (*instantiate_call)(CUgraphExec *, CUgraph, void *);

static CUresult instantiate(CUgraphExec *out, CUgraph graph, instantiate_call call, void *ctx) {
    if (!hami_shim_accounting() || !out) return call(out, graph, ctx);
    graph_exec *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    int any = footprint(graph, e->bytes);
    if (any <= 0) { /* no memory nodes (or not readable): nothing to charge */
        free(e);
        return call(out, graph, ctx);
    }
    uint64_t reserved[NDEV] = {0};
    for (int d = 0; d < NDEV; d++) {
        if (!e->bytes[d]) continue;
        if (hami_cuda_reserve(d, e->bytes[d], NULL) != CUDA_SUCCESS) {
            release_all(reserved);
            free(e);
            return CUDA_ERROR_OUT_OF_MEMORY; /* its launches could take more than the limit leaves */
        }
        reserved[d] = e->bytes[d];
    }
    CUresult rc = call(out, graph, ctx);
    if (rc != CUDA_SUCCESS) {
        release_all(reserved);
        free(e);
        return rc;
    }
    e->exec = *out;
    pthread_mutex_lock(&g_mu);
    for (int d = 0; d < NDEV; d++) g_live[d] += e->bytes[d];
    e->next = g_execs;
    g_execs = e;
    __atomic_store_n(&g_any, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static CUresult call_with_flags(CUgraphExec *out, CUgraph g, void *ctx) {
    return hami_real.cuGraphInstantiateWithFlags(out, g, *(unsigned long long *)ctx);
}
static CUresult call_with_params(CUgraphExec *out, CUgraph g, void *ctx) {
    return hami_real.cuGraphInstantiateWithParams(out, g, ctx);
}
static CUresult call_with_params_ptsz(CUgraphExec *out, CUgraph g, void *ctx) {
    return hami_real.cuGraphInstantiateWithParams_ptsz(out, g, ctx);
}

typedef struct { CUgraphNode *err_node; char *log; size_t log_size; } legacy_args;

static CUresult call_legacy(CUgraphExec *out, CUgraph g, void *ctx) {
    legacy_args *a = ctx;
    return hami_real.cuGraphInstantiate_v2(out, g, a->err_node, a->log, a->log_size);
}

HAMI_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuGraphInstantiateWithFlags);
    return instantiate(phGraphExec, hGraph, call_with_flags, &flags);
}

HAMI_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuGraphInstantiateWithParams);
    CUresult rc = instantiate(phGraphExec, hGraph, call_with_params, instantiateParams);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && instantiateParams) instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

HAMI_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuGraphInstantiateWithParams_ptsz);
    CUresult rc = instantiate(phGraphExec, hGraph, call_with_params_ptsz, instantiateParams);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && instantiateParams) instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

HAMI_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                           char *logBuffer, size_t bufferSize) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuGraphInstantiate_v2);
    legacy_args a = {phErrorNode, logBuffer, bufferSize};
    return instantiate(phGraphExec, hGraph, call_legacy, &a);
}

/* Lowers a device's cached charge to what the graph allocator still reserves.  Caller holds g_mu. */
static uint64_t settle_locked(int dev) {
    if (!g_cached[dev] || !hami_real.cuDeviceGetGraphMemAttribute) return 0;
    cuuint64_t reserved = 0;
    if (hami_real.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
        CUDA_SUCCESS)
        return 0;
    if (reserved >= g_cached[dev]) return 0;
    uint64_t freed = g_cached[dev] - reserved;
    g_cached[dev] = reserved;
    hami_shim_release(dev, freed);
    return freed;
}

HAMI_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuGraphExecDestroy);
    if (!__atomic_load_n(&g_any, __ATOMIC_ACQUIRE)) return hami_real.cuGraphExecDestroy(hGraphExec);
    pthread_mutex_lock(&g_mu);
    CUresult rc = hami_real.cuGraphExecDestroy(hGraphExec);
    for (graph_exec **pp = &g_execs; rc == CUDA_SUCCESS && *pp; pp = &(*pp)->next) {
        if ((*pp)->exec != hGraphExec) continue;
        graph_exec *e = *pp;
        *pp = e->next;
        for (int d = 0; d < NDEV; d++) {
            if (!e->bytes[d]) continue;
            /* Its memory may stay cached by the graph allocator: charged until that shrinks. */
            g_live[d] -= e->bytes[d];
            g_cached[d] += e->bytes[d];
            settle_locked(d);
        }
        free(e);
        break;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

HAMI_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuDeviceGraphMemTrim);
    CUresult rc = hami_real.cuDeviceGraphMemTrim(device);
    if (rc == CUDA_SUCCESS && device >= 0 && device < NDEV && __atomic_load_n(&g_any, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&g_mu);
        settle_locked(device);
        pthread_mutex_unlock(&g_mu);
    }
    return rc;
}

void hami_cuda_graphs_settle(void) {
    if (!__atomic_load_n(&g_any, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&g_mu);
    for (int d = 0; d < NDEV; d++) settle_locked(d);
    pthread_mutex_unlock(&g_mu);
}

uint64_t hami_cuda_graphs_trim(int dev) {
    if (dev < 0 || dev >= NDEV || !__atomic_load_n(&g_any, __ATOMIC_ACQUIRE)) return 0;
    /* trylock: the refusal may come from inside an instantiation of another thread. */
    if (pthread_mutex_trylock(&g_mu) != 0) return 0;
    uint64_t freed = 0;
    if (g_cached[dev] && hami_real.cuDeviceGraphMemTrim && hami_real.cuDeviceGraphMemTrim(dev) == CUDA_SUCCESS)
        freed = settle_locked(dev);
    pthread_mutex_unlock(&g_mu);
    return freed;
}

void hami_cuda_graph_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    g_execs = NULL;
    memset(g_live, 0, sizeof g_live);
    memset(g_cached, 0, sizeof g_cached);
    __atomic_store_n(&g_any, 0, __ATOMIC_RELEASE);
}
