/* The fake's graphs and their memory nodes.  A memory-allocation node gets its
 * device address when it is added; physical memory is taken when the graph is
 * *launched*, from a per-device graph pool that keeps it (for the next launch,
 * or any graph) until cuDeviceGraphMemTrim.  An allocation the graph also
 * frees returns to the pool at the end of the launch; one it does not free
 * stays in use until cuMemFree(Async) -- and the graph cannot be launched
 * again before that, as in CUDA.  Other nodes are not modelled: a launch runs
 * one fake kernel (fake_cuda.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

struct CUgraphNode_st {
    CUgraphNodeType type;
    int device;
    uint64_t bytes, dptr;
    struct CUgraphNode_st *next;
};

struct CUgraph_st {
    struct CUgraphNode_st *nodes; /* newest first */
    size_t count;
};

typedef struct fake_exec_alloc {
    int device;
    uint64_t bytes, dptr;
    int freed_in_graph;
} fake_exec_alloc;

struct CUgraphExec_st {
    size_t n;
    fake_exec_alloc *allocs;
};

/* Per device: what the graph allocator holds, and what is in use. */
static struct {
    uint64_t reserved, in_use, reserved_high, used_high;
} g_pool[HAMI_FAKE_GPU_MAX_DEVICES];

/* Allocations of launched graphs not freed by their graph: address -> (size, device). */
static hami_ptrmap g_live;

EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = calloc(1, sizeof **phGraph);
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
    if (!hGraph) return CUDA_ERROR_INVALID_VALUE;
    while (hGraph->nodes) {
        struct CUgraphNode_st *n = hGraph->nodes;
        hGraph->nodes = n->next;
        free(n);
    }
    free(hGraph);
    return CUDA_SUCCESS;
}

static CUresult add(CUgraph g, CUgraphNode *out, CUgraphNodeType type, int dev, uint64_t bytes, uint64_t dptr) {
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->type = type;
    n->device = dev;
    n->bytes = bytes;
    n->dptr = dptr;
    pthread_mutex_lock(&fake_mu);
    n->next = g->nodes;
    g->nodes = n;
    g->count++;
    pthread_mutex_unlock(&fake_mu);
    if (out) *out = n;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    if (!hGraph || !nodeParams || nodeParams->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    int dev = nodeParams->poolProps.location.id;
    if (!fake_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    /* The address is fixed now; the memory behind it comes at launch. */
    nodeParams->dptr = fake_new_va(nodeParams->bytesize);
    return add(hGraph, phGraphNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, dev, nodeParams->bytesize, nodeParams->dptr);
}

EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, CUdeviceptr dptr) {
    if (!hGraph || !dptr) return CUDA_ERROR_INVALID_VALUE;
    return add(hGraph, phGraphNode, CU_GRAPH_NODE_TYPE_MEM_FREE, -1, 0, dptr);
}

EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    if (!hGraph || !numNodes) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    size_t want = *numNodes, i = 0;
    if (nodes)
        for (struct CUgraphNode_st *n = hGraph->nodes; n && i < want; n = n->next) nodes[i++] = n;
    if (nodes && want > i) memset(nodes + i, 0, (want - i) * sizeof *nodes);
    *numNodes = nodes ? i : hGraph->count;
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    if (!hNode || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = hNode->type;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out) {
    if (!hNode || !params_out || hNode->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
    memset(params_out, 0, sizeof *params_out);
    params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params_out->poolProps.location.id = hNode->device;
    params_out->bytesize = hNode->bytes;
    params_out->dptr = hNode->dptr;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *out, CUgraph g) {
    if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_mu);
    for (struct CUgraphNode_st *n = g->nodes; n; n = n->next) e->n += n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    e->allocs = calloc(e->n ? e->n : 1, sizeof *e->allocs);
    size_t i = 0;
    for (struct CUgraphNode_st *n = g->nodes; n && e->allocs; n = n->next) {
        if (n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) continue;
        fake_exec_alloc *a = &e->allocs[i++];
        a->device = n->device;
        a->bytes = n->bytes;
        a->dptr = n->dptr;
        for (struct CUgraphNode_st *f = g->nodes; f; f = f->next)
            a->freed_in_graph |= f->type == CU_GRAPH_NODE_TYPE_MEM_FREE && f->dptr == n->dptr;
    }
    pthread_mutex_unlock(&fake_mu);
    if (!e->allocs) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    return instantiate(phGraphExec, hGraph);
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult rc = instantiate(phGraphExec, hGraph);
    if (params) params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    if (!hGraphExec) return CUDA_ERROR_INVALID_VALUE;
    /* Its memory stays cached in the device's graph pool. */
    free(hGraphExec->allocs);
    free(hGraphExec);
    return CUDA_SUCCESS;
}

static void grow_high(int dev) {
    if (g_pool[dev].reserved > g_pool[dev].reserved_high) g_pool[dev].reserved_high = g_pool[dev].reserved;
    if (g_pool[dev].in_use > g_pool[dev].used_high) g_pool[dev].used_high = g_pool[dev].in_use;
}

CUresult fake_graph_run(CUgraphExec e, CUstream s) {
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    uint64_t size;
    int32_t dev;
    pthread_mutex_lock(&fake_mu);
    CUresult rc = CUDA_SUCCESS;
    size_t done = 0;
    for (; done < e->n && rc == CUDA_SUCCESS; done++) {
        fake_exec_alloc *a = &e->allocs[done];
        if (hami_ptrmap_take(&g_live, a->dptr, &size, &dev) == 0) { /* last launch's allocation not freed */
            hami_ptrmap_put(&g_live, a->dptr, size, dev);
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        uint64_t idle = g_pool[a->device].reserved - g_pool[a->device].in_use;
        if (idle < a->bytes) {
            uint64_t grow = (a->bytes - idle + FAKE_GRANULARITY - 1) / FAKE_GRANULARITY * FAKE_GRANULARITY;
            rc = fake_take(a->device, grow);
            if (rc != CUDA_SUCCESS) break;
            g_pool[a->device].reserved += grow;
        }
        g_pool[a->device].in_use += a->bytes;
        grow_high(a->device);
    }
    for (size_t i = 0; i < done; i++) {
        fake_exec_alloc *a = &e->allocs[i];
        /* Freed by the graph itself (or the launch failed): back to the pool, which keeps it. */
        if (a->freed_in_graph || rc != CUDA_SUCCESS) g_pool[a->device].in_use -= a->bytes;
        else hami_ptrmap_put(&g_live, a->dptr, a->bytes, a->device);
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

int fake_graph_owns(uint64_t ptr) {
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&g_live, ptr, &size, &dev) != 0) return 0;
    hami_ptrmap_put(&g_live, ptr, size, dev);
    return 1;
}

CUresult fake_graph_free(uint64_t ptr) {
    uint64_t size;
    int32_t dev;
    if (hami_ptrmap_take(&g_live, ptr, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    g_pool[dev].in_use -= size;
    pthread_mutex_unlock(&fake_mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    if (!fake_valid_dev(device)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fake_mu);
    uint64_t idle = g_pool[device].reserved - g_pool[device].in_use;
    g_pool[device].reserved -= idle;
    pthread_mutex_unlock(&fake_mu);
    if (idle) fake_give(device, idle);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
    if (!fake_valid_dev(device)) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    CUresult rc = CUDA_SUCCESS;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = g_pool[device].in_use; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = g_pool[device].used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = g_pool[device].reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = g_pool[device].reserved_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}
