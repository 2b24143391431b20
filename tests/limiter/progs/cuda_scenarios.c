/* Scenarios for the CUDA shim's memory accounting beyond cuMemAlloc: a real
 * process linked against libcuda.so.1 (the fake), run with or without the
 * shim in LD_PRELOAD.  Each prints "name rc=N" lines (N: the CUresult, or a
 * count) that the tests read.  Sizes are in MiB.
 *
 *   cuda_scenarios vmm M                 create M, map, release (x3), unmap; retain, unmap, release
 *   cuda_scenarios pool-explicit M       cuMemPoolCreate on device 0, then M from it
 *   cuda_scenarios pool-deferred M       M async on a stream, cuMemFreeAsync, then M with cuMemAlloc
 *                                        before and after the stream is synchronised
 *   cuda_scenarios pool-retained M       as above with the pool keeping all freed memory (threshold max)
 *   cuda_scenarios plain-deferred M      M with cuMemAlloc, cuMemFreeAsync, M again before and after a sync
 *   cuda_scenarios pool-stream M         M async on a stream of device 1 while device 0 is current
 *   cuda_scenarios arrays N W H          up to N float4 W x H arrays, then 3D and mipmapped ones
 *   cuda_scenarios graph M               graphs with an M alloc+free node: instantiate, launch, destroy
 *   cuda_scenarios nvml                  NVML memory info of device 0 through dlopen + dlsym
 *   cuda_scenarios forkthreads N         fork; the child's N threads allocate 1 MiB each at once
 *   cuda_scenarios legacy M              the v1 (32-bit ABI) entry points, through dlsym and cuGetProcAddress
 *   cuda_scenarios sync13 M              M, cuMemFreeAsync, then CUDA 13's cuCtxSynchronize_v2 (called
 *                                        directly, through dlsym and through cuGetProcAddress), then M again
 *   cuda_scenarios query M               the same settled by cuEventQuery, then by cuStreamQuery
 *   cuda_scenarios spill M N             N allocations of M with cuMemAlloc_v2 (each printed), READY, and on a
 *                                        line of input: free them all, print "freed", READY again, exit on EOF
 *   cuda_scenarios share M N             N times: create M, export it as a POSIX fd, import that fd, release
 *                                        the original and map the imported handle (kept), printing each create
 *   cuda_scenarios share-export M        create M, export it: print "fd N", READY; on a line of input release
 *                                        the handle, print "released", READY; exit on EOF
 *   cuda_scenarios share-import PATH     import the fd at PATH (/proc/<pid>/fd/<n>), map it: READY, exit on EOF
 *   cuda_scenarios zombieleader M        a thread allocates M and keeps it; the process forks, then its main
 *                                        thread exits (the leader is a zombie, the process lives on); the child
 *                                        waits for that and allocates 2M/3: "child_alloc rc=N", then kills it
 *   cuda_scenarios limits M              cuCtxSetLimit raising the malloc heap, printf FIFO and thread
 *                                        stacks by 2M then M/2 beyond their defaults, with allocations between
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hami_cuda_api.h"
#include "hami_nvml_api.h"

#define MIB (1ull << 20)

static CUcontext use_device(int dev) {
    CUcontext ctx;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "no device %d\n", dev);
        exit(3);
    }
    return ctx;
}

static void say(const char *what, int rc) { printf("%s rc=%d\n", what, rc); }

static CUmemAllocationProp device_prop(int dev) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

/* create -> reserve -> map -> release: the memory stays in use through the mapping. */
static int map_released(size_t bytes, CUdeviceptr *va) {
    CUmemAllocationProp prop = device_prop(0);
    CUmemGenericAllocationHandle h;
    int rc = cuMemCreate(&h, bytes, &prop, 0);
    if (rc != CUDA_SUCCESS) return rc;
    if ((rc = cuMemAddressReserve(va, bytes, 0, 0, 0)) != CUDA_SUCCESS) return rc;
    if ((rc = cuMemMap(*va, bytes, 0, h, 0)) != CUDA_SUCCESS) return rc;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((rc = cuMemSetAccess(*va, bytes, &access, 1)) != CUDA_SUCCESS) return rc;
    return cuMemRelease(h);
}

static int cmd_vmm(size_t mib) {
    size_t bytes = mib * MIB;
    CUdeviceptr va[3] = {0};
    char name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "map_released%d", i + 1);
        say(name, map_released(bytes, &va[i]));
    }
    say("unmap1", cuMemUnmap(va[0], bytes));
    CUdeviceptr again = 0;
    say("map_released_after_unmap", map_released(bytes, &again));
    /* A retained handle is one more reference: with its creator's released and its mapping
     * gone, the memory is held until the retained reference is released too. */
    CUmemGenericAllocationHandle retained;
    int rc = (int)cuMemRetainAllocationHandle(&retained, (void *)(uintptr_t)va[1]);
    say("retain2", rc);
    say("unmap2", cuMemUnmap(va[1], bytes));
    CUdeviceptr other = 0;
    say("map_released_while_retained", map_released(bytes, &other));
    say("release_retained2", rc == CUDA_SUCCESS ? (int)cuMemRelease(retained) : rc);
    say("map_released_after_retained", map_released(bytes, &other));
    return 0;
}

static CUstream new_stream(void) {
    CUstream s;
    if (cuStreamCreate(&s, 0) != CUDA_SUCCESS) exit(4);
    return s;
}

static int cmd_pool_explicit(size_t mib) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    say("pool_create", cuMemPoolCreate(&pool, &props));
    CUstream s = new_stream();
    CUdeviceptr p;
    int rc = cuMemAllocFromPoolAsync(&p, mib * MIB, pool, s);
    say("from_pool", rc);
    if (rc == CUDA_SUCCESS) say("free", cuMemFreeAsync(p, s));
    say("sync", cuStreamSynchronize(s));
    say("destroy", cuMemPoolDestroy(pool));
    return 0;
}

static int cmd_pool_deferred(size_t mib, int retain) {
    size_t bytes = mib * MIB;
    CUstream s = new_stream();
    if (retain) {
        CUmemoryPool pool;
        cuuint64_t keep_all = ~0ull;
        say("get_pool", cuDeviceGetMemPool(&pool, 0));
        say("threshold", cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    }
    CUdeviceptr a, b;
    say("async", cuMemAllocAsync(&a, bytes, s));
    say("free_async", cuMemFreeAsync(a, s));
    if (!retain) {
        /* The stream has not reached the free: the pool still holds the memory. */
        int rc = cuMemAlloc_v2(&b, bytes);
        say("alloc_before_sync", rc);
        if (rc == CUDA_SUCCESS) cuMemFree_v2(b);
    }
    say("sync", cuStreamSynchronize(s));
    /* Synchronised: the pool keeps the memory only if its threshold says so. */
    int rc = cuMemAlloc_v2(&b, bytes);
    say("alloc_after_sync", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(b);
    return 0;
}

static int cmd_plain_deferred(size_t mib) {
    CUstream s = new_stream();
    CUdeviceptr a, b;
    say("alloc", cuMemAlloc_v2(&a, mib * MIB));
    say("free_async", cuMemFreeAsync(a, s));
    int rc = cuMemAlloc_v2(&b, mib * MIB);
    say("alloc_before_sync", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(b);
    say("sync", cuStreamSynchronize(s));
    rc = cuMemAlloc_v2(&b, mib * MIB);
    say("alloc_after_sync", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(b);
    return 0;
}

static int cmd_pool_stream(size_t mib) {
    use_device(1);
    CUstream on1 = new_stream();
    use_device(0);
    CUdeviceptr p;
    int rc = cuMemAllocAsync(&p, mib * MIB, on1);
    say("async_on_device1", rc);
    printf("READY\n");
    fflush(stdout);
    char line[8];
    if (!fgets(line, sizeof line, stdin)) return 0; /* the test reads the region, then says go */
    if (rc == CUDA_SUCCESS) say("free", cuMemFreeAsync(p, on1));
    say("sync", cuStreamSynchronize(on1));
    return 0;
}

static CUDA_ARRAY3D_DESCRIPTOR float4(size_t w, size_t h, size_t d) {
    CUDA_ARRAY3D_DESCRIPTOR desc;
    memset(&desc, 0, sizeof desc);
    desc.Width = w;
    desc.Height = h;
    desc.Depth = d;
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 4;
    return desc;
}

static int cmd_arrays(int n, size_t w, size_t h) {
    CUarray arrays[64];
    int made = 0, rc = CUDA_SUCCESS;
    CUDA_ARRAY_DESCRIPTOR d2 = {w, h, CU_AD_FORMAT_FLOAT, 4};
    while (made < n && made < 64 && (rc = cuArrayCreate_v2(&arrays[made], &d2)) == CUDA_SUCCESS) made++;
    printf("arrays %d\n", made);
    say("array_refused", rc);
    if (made) say("array_destroy", cuArrayDestroy(arrays[--made]));
    rc = cuArrayCreate_v2(&arrays[made], &d2);
    say("array_again", rc);
    made += rc == CUDA_SUCCESS;
    while (made > 0) cuArrayDestroy(arrays[--made]);
    CUDA_ARRAY3D_DESCRIPTOR d3 = float4(w, h, 16);
    CUarray a3;
    rc = cuArray3DCreate_v2(&a3, &d3);
    say("array3d_x16", rc);
    if (rc == CUDA_SUCCESS) cuArrayDestroy(a3);
    d3.Depth = 2;
    rc = cuArray3DCreate_v2(&a3, &d3);
    say("array3d_x2", rc);
    if (rc == CUDA_SUCCESS) cuArrayDestroy(a3);
    CUDA_ARRAY3D_DESCRIPTOR dm = float4(w * 2, h * 2, 0);
    CUmipmappedArray m;
    rc = cuMipmappedArrayCreate(&m, &dm, 8);
    say("mipmapped_2x", rc);
    if (rc == CUDA_SUCCESS) say("mipmapped_destroy", cuMipmappedArrayDestroy(m));
    dm = float4(w, h, 0);
    rc = cuMipmappedArrayCreate(&m, &dm, 8);
    say("mipmapped_1x", rc);
    if (rc == CUDA_SUCCESS) say("mipmapped_destroy", cuMipmappedArrayDestroy(m));
    return 0;
}

static CUresult graph_with(size_t bytes, CUgraph *g) {
    CUresult rc = cuGraphCreate(g, 0);
    if (rc != CUDA_SUCCESS) return rc;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    CUgraphNode alloc, freed;
    if ((rc = cuGraphAddMemAllocNode(&alloc, *g, NULL, 0, &p)) != CUDA_SUCCESS) return rc;
    return cuGraphAddMemFreeNode(&freed, *g, &alloc, 1, p.dptr);
}

static int cmd_graph(size_t mib) {
    CUgraph big, small;
    CUgraphExec exec;
    say("graph_big", graph_with(2 * mib * MIB, &big));
    int rc = cuGraphInstantiateWithFlags(&exec, big, 0);
    say("instantiate_big", rc);
    if (rc == CUDA_SUCCESS) {
        say("launch_big", cuGraphLaunch(exec, NULL));
        cuStreamSynchronize(NULL);
        cuGraphExecDestroy(exec);
    }
    say("graph_small", graph_with(mib * MIB, &small));
    CUDA_GRAPH_INSTANTIATE_PARAMS params;
    memset(&params, 0, sizeof params);
    say("instantiate_small", cuGraphInstantiateWithParams(&exec, small, &params));
    say("launch_small", cuGraphLaunch(exec, NULL));
    say("sync", cuStreamSynchronize(NULL));
    CUdeviceptr p;
    rc = cuMemAlloc_v2(&p, mib * MIB);
    say("alloc_while_graph_lives", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(p);
    say("exec_destroy", cuGraphExecDestroy(exec));
    rc = cuMemAlloc_v2(&p, mib * MIB);
    say("alloc_after_destroy", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(p);
    return 0;
}

static int cmd_nvml(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("nvml_load rc=-1\n");
        return 0;
    }
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(lib, "nvmlInit_v2");
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    __typeof__(&nvmlDeviceGetMemoryInfo) info = (__typeof__(&nvmlDeviceGetMemoryInfo))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    __typeof__(&nvmlDeviceGetMemoryInfo_v2) info2 =
        (__typeof__(&nvmlDeviceGetMemoryInfo_v2))dlsym(lib, "nvmlDeviceGetMemoryInfo_v2");
    nvmlDevice_t dev;
    say("nvml_init", init());
    for (unsigned int i = 0; by_index(i, &dev) == NVML_SUCCESS; i++) {
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        memset(&m2, 0, sizeof m2);
        m2.version = nvmlMemory_v2;
        int rc = info(dev, &m);
        printf("nvml%u rc=%d total=%llu used=%llu free=%llu\n", i, rc, m.total, m.used, m.free);
        rc = info2(dev, &m2);
        printf("nvml%u_v2 rc=%d total=%llu used=%llu free=%llu reserved=%llu\n", i, rc, m2.total, m2.used, m2.free,
               m2.reserved);
    }
    return 0;
}

static pthread_barrier_t g_start;

static void *first_alloc(void *arg) {
    CUcontext *ctx = arg;
    cuCtxSetCurrent(*ctx);
    pthread_barrier_wait(&g_start);
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, MIB) != CUDA_SUCCESS) fprintf(stderr, "child alloc failed\n");
    return NULL;
}

static int cmd_forkthreads(int n) {
    CUcontext ctx = use_device(0);
    CUdeviceptr p;
    say("parent_alloc", cuMemAlloc_v2(&p, MIB));
    pid_t child = fork();
    if (child == 0) {
        pthread_t t[64];
        if (n > 64) n = 64;
        pthread_barrier_init(&g_start, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, first_alloc, &ctx);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("child %d\n", (int)getpid());
        fflush(stdout);
        for (;;) pause();
    }
    printf("forked %d\n", (int)child);
    fflush(stdout);
    for (;;) pause();
    return 0;
}

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lookup(const char *name, int version) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    return cuGetProcAddress_v2(name, &fn, version, 0, &st) == CUDA_SUCCESS ? fn : NULL;
}

static int cmd_legacy(size_t mib) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    __typeof__(&cuMemAlloc) alloc1 = (__typeof__(&cuMemAlloc))dlsym(h, "cuMemAlloc");
    __typeof__(&cuMemFree) free1 = (__typeof__(&cuMemFree))dlsym(h, "cuMemFree");
    __typeof__(&cuMemAllocPitch) pitch1 = (__typeof__(&cuMemAllocPitch))dlsym(h, "cuMemAllocPitch");
    __typeof__(&cuArrayCreate) array1 = (__typeof__(&cuArrayCreate))dlsym(h, "cuArrayCreate");
    __typeof__(&cuArray3DCreate) array3d1 = (__typeof__(&cuArray3DCreate))dlsym(h, "cuArray3DCreate");
    __typeof__(&cuMemGetInfo) info1 = (__typeof__(&cuMemGetInfo))lookup("cuMemGetInfo", 3000);
    __typeof__(&cuMemAlloc) gpa_alloc1 = (__typeof__(&cuMemAlloc))lookup("cuMemAlloc", 3000);
    unsigned int big = (unsigned int)(2 * mib * MIB), pitch, f, t;
    CUdeviceptr_v1 p;
    say("dlsym_alloc_v1_2x", alloc1(&p, big));
    say("gpa_alloc_v1_2x", gpa_alloc1(&p, big));
    say("dlsym_pitch_v1_2x", pitch1(&p, &pitch, 1u << 20, (unsigned int)(2 * mib), 1));
    CUDA_ARRAY_DESCRIPTOR_v1 d2 = {4096, (unsigned int)(2 * mib * 16), CU_AD_FORMAT_FLOAT, 4}; /* 64 KiB rows */
    CUarray a;
    int rc = array1(&a, &d2);
    say("dlsym_array_v1_2x", rc);
    if (rc == CUDA_SUCCESS) cuArrayDestroy(a);
    CUDA_ARRAY3D_DESCRIPTOR_v1 d3 = {4096, (unsigned int)(mib * 16), 2, CU_AD_FORMAT_FLOAT, 4, 0};
    rc = array3d1(&a, &d3);
    say("dlsym_array3d_v1_2x", rc);
    if (rc == CUDA_SUCCESS) cuArrayDestroy(a);
    say("info_v1", info1(&f, &t));
    printf("info_v1_total %u\n", t);
    rc = alloc1(&p, (unsigned int)(mib * MIB));
    say("dlsym_alloc_v1_1x", rc);
    say("free_v1", rc == CUDA_SUCCESS ? (int)free1(p) : rc);
    CUdeviceptr q;
    rc = cuMemAlloc_v2(&q, mib * MIB); /* what the v1 free gave back is free again */
    say("alloc_v2_after_free_v1", rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(q);
    return 0;
}

/* Allocates M, frees it in stream order, settles with `settle`, and allocates M again. */
static void settle_then_alloc(const char *what, size_t bytes, CUstream s, CUresult (*settle)(CUstream, void *),
                              void *arg) {
    CUdeviceptr a, b;
    if (cuMemAlloc_v2(&a, bytes) != CUDA_SUCCESS || cuMemFreeAsync(a, s) != CUDA_SUCCESS) exit(5);
    say(what, settle(s, arg));
    int rc = cuMemAlloc_v2(&b, bytes);
    char name[64];
    snprintf(name, sizeof name, "alloc_after_%s", what);
    say(name, rc);
    if (rc == CUDA_SUCCESS) cuMemFree_v2(b);
}

static CUresult sync_direct(CUstream s, void *arg) {
    (void)s, (void)arg;
    return cuCtxSynchronize_v2(NULL);
}
static CUresult sync_by_pointer(CUstream s, void *fn) {
    (void)s;
    return fn ? ((__typeof__(&cuCtxSynchronize_v2))fn)(NULL) : CUDA_ERROR_NOT_FOUND;
}

static CUresult event_query(CUstream s, void *arg) {
    (void)arg;
    CUevent e;
    CUresult rc;
    cuEventCreate(&e, 0);
    cuEventRecord(e, s);
    while ((rc = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) sched_yield();
    cuEventDestroy_v2(e);
    return rc;
}

static CUresult stream_query(CUstream s, void *arg) {
    (void)arg;
    CUresult rc;
    while ((rc = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) sched_yield();
    return rc;
}

static int cmd_sync13(size_t mib) {
    CUstream s = new_stream();
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    settle_then_alloc("ctx_sync_v2", mib * MIB, s, sync_direct, NULL);
    settle_then_alloc("dlsym_ctx_sync_v2", mib * MIB, s, sync_by_pointer, dlsym(h, "cuCtxSynchronize_v2"));
    settle_then_alloc("gpa13_ctx_sync", mib * MIB, s, sync_by_pointer, lookup("cuCtxSynchronize", 13000));
    return 0;
}

static int cmd_query(size_t mib) {
    CUstream s = new_stream();
    settle_then_alloc("event_query", mib * MIB, s, event_query, NULL);
    settle_then_alloc("stream_query", mib * MIB, s, stream_query, NULL);
    return 0;
}

/* Sets `limit` so that it takes `extra` bytes more than its default. */
static int raise_limit(CUlimit limit, size_t dflt, uint64_t extra) {
    size_t value = dflt + extra;
    if (limit == CU_LIMIT_STACK_SIZE) {
        int sms = 0, threads = 0;
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
        cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0);
        value = dflt + extra / ((uint64_t)sms * (uint64_t)threads);
    }
    return cuCtxSetLimit(limit, value);
}

static int cmd_limits(size_t mib) {
    static const struct { CUlimit limit; const char *name; } LIMITS[] = {
        {CU_LIMIT_MALLOC_HEAP_SIZE, "heap"}, {CU_LIMIT_PRINTF_FIFO_SIZE, "fifo"}, {CU_LIMIT_STACK_SIZE, "stack"}};
    char name[64];
    for (int i = 0; i < 3; i++) {
        size_t dflt = 0;
        cuCtxGetLimit(&dflt, LIMITS[i].limit);
        snprintf(name, sizeof name, "%s_2x", LIMITS[i].name);
        say(name, raise_limit(LIMITS[i].limit, dflt, 2 * mib * MIB));
        snprintf(name, sizeof name, "%s_half", LIMITS[i].name);
        say(name, raise_limit(LIMITS[i].limit, dflt, mib * MIB / 2));
        CUdeviceptr p;
        int rc = cuMemAlloc_v2(&p, mib * MIB); /* the raised limit holds M/2: M more does not fit */
        snprintf(name, sizeof name, "alloc_after_%s", LIMITS[i].name);
        say(name, rc);
        if (rc == CUDA_SUCCESS) cuMemFree_v2(p);
        snprintf(name, sizeof name, "%s_back", LIMITS[i].name);
        say(name, cuCtxSetLimit(LIMITS[i].limit, dflt));
        rc = cuMemAlloc_v2(&p, mib * MIB);
        snprintf(name, sizeof name, "alloc_after_%s_back", LIMITS[i].name);
        say(name, rc);
        if (rc == CUDA_SUCCESS) cuMemFree_v2(p);
    }
    return 0;
}

static int cmd_spill(size_t mib, int n) {
    CUdeviceptr p[64];
    int held = 0;
    char name[32], line[8];
    for (int i = 0; i < n && i < 64; i++) {
        int rc = cuMemAlloc_v2(&p[held], mib * MIB);
        snprintf(name, sizeof name, "alloc%d", i + 1);
        say(name, rc);
        held += rc == CUDA_SUCCESS;
    }
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    printf("meminfo free=%zu total=%zu\n", f, t);
    printf("READY\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 0;
    int bad = 0;
    while (held > 0) bad |= (int)cuMemFree_v2(p[--held]);
    say("freed", bad);
    printf("READY\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}

static int export_fd(CUmemGenericAllocationHandle h) {
    int fd = -1;
    int rc = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    return rc == CUDA_SUCCESS ? fd : -rc;
}

static int map_handle(CUmemGenericAllocationHandle h, size_t bytes) {
    CUdeviceptr va;
    int rc = cuMemAddressReserve(&va, bytes, 0, 0, 0);
    return rc != CUDA_SUCCESS ? rc : (int)cuMemMap(va, bytes, 0, h, 0);
}

static int cmd_share(size_t mib, int n) {
    size_t bytes = mib * MIB;
    CUmemAllocationProp prop = device_prop(0);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    char name[32];
    for (int i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h, imported;
        int rc = cuMemCreate(&h, bytes, &prop, 0);
        snprintf(name, sizeof name, "create%d", i + 1);
        say(name, rc);
        if (rc != CUDA_SUCCESS) continue;
        int fd = export_fd(h);
        if (fd < 0 || cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd, prop.requestedHandleTypes) ||
            cuMemRelease(h) || map_handle(imported, bytes)) {
            say("share_failed", fd);
            return 5;
        }
        close(fd);
    }
    return 0;
}

static void wait_line(void) {
    char line[8];
    printf("READY\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) exit(0);
}

static int cmd_share_export(size_t mib) {
    CUmemAllocationProp prop = device_prop(0);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h;
    int rc = cuMemCreate(&h, mib * MIB, &prop, 0);
    say("create", rc);
    printf("fd %d\n", rc == CUDA_SUCCESS ? export_fd(h) : -1);
    wait_line();
    say("released", cuMemRelease(h));
    wait_line();
    while (getchar() != EOF) {
    }
    return 0;
}

static int cmd_share_import(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CUmemGenericAllocationHandle h;
    int rc = fd < 0 ? -1 : (int)cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    say("import", rc);
    if (rc == CUDA_SUCCESS) say("map", map_handle(h, 48 * MIB));
    wait_line();
    return 0;
}

static size_t g_hold_bytes;
static pthread_barrier_t g_held;

static void *hold_forever(void *arg) {
    cuCtxSetCurrent(*(CUcontext *)arg);
    CUdeviceptr p;
    say("holder_alloc", cuMemAlloc_v2(&p, g_hold_bytes));
    pthread_barrier_wait(&g_held);
    for (;;) pause();
    return NULL;
}

static char proc_state(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' ? rp[2] : 0;
}

static int cmd_zombie_leader(size_t mib) {
    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    g_hold_bytes = mib * MIB;
    pthread_barrier_init(&g_held, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, hold_forever, &ctx);
    pthread_barrier_wait(&g_held);
    pid_t parent = getpid();
    if (fork() == 0) {
        for (int i = 0; i < 10000 && proc_state(parent) != 'Z'; i++) usleep(1000);
        printf("leader_state %c\n", proc_state(parent));
        CUdeviceptr q;
        say("child_alloc", cuMemAlloc_v2(&q, mib * MIB * 2 / 3));
        kill(parent, SIGKILL);
        exit(0);
    }
    pthread_exit(NULL); /* the holder thread keeps the process, and its memory, alive */
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    const char *cmd = argv[1];
    if (strcmp(cmd, "nvml") == 0) return cmd_nvml(); /* NVML alone, as nvidia-smi: CUDA never initialised */
    int rc = cuInit(0);
    if (rc != CUDA_SUCCESS) {
        printf("cuInit rc=%d\n", rc);
        return 7;
    }
    if (strcmp(cmd, "forkthreads") != 0) use_device(0);
    size_t m = argc >= 3 ? strtoull(argv[2], NULL, 10) : 0;
    if (!strcmp(cmd, "vmm")) return cmd_vmm(m);
    if (!strcmp(cmd, "pool-explicit")) return cmd_pool_explicit(m);
    if (!strcmp(cmd, "pool-deferred")) return cmd_pool_deferred(m, 0);
    if (!strcmp(cmd, "pool-retained")) return cmd_pool_deferred(m, 1);
    if (!strcmp(cmd, "pool-stream")) return cmd_pool_stream(m);
    if (!strcmp(cmd, "plain-deferred")) return cmd_plain_deferred(m);
    if (!strcmp(cmd, "arrays") && argc >= 5) return cmd_arrays(atoi(argv[2]), strtoull(argv[3], NULL, 10),
                                                              strtoull(argv[4], NULL, 10));
    if (!strcmp(cmd, "graph")) return cmd_graph(m);
    if (!strcmp(cmd, "forkthreads")) return cmd_forkthreads((int)m);
    if (!strcmp(cmd, "legacy")) return cmd_legacy(m);
    if (!strcmp(cmd, "sync13")) return cmd_sync13(m);
    if (!strcmp(cmd, "query")) return cmd_query(m);
    if (!strcmp(cmd, "limits")) return cmd_limits(m);
    if (!strcmp(cmd, "zombieleader")) return cmd_zombie_leader(m);
    if (!strcmp(cmd, "share") && argc >= 4) return cmd_share(m, atoi(argv[3]));
    if (!strcmp(cmd, "share-export")) return cmd_share_export(m);
    if (!strcmp(cmd, "share-import") && argc >= 3) return cmd_share_import(argv[2]);
    if (!strcmp(cmd, "spill") && argc >= 4) return cmd_spill(m, atoi(argv[3]));
    return 2;
}
