/* Test driver for the CUDA shim: a real process linked against libcuda.so.1
 * (the fake, found through LD_LIBRARY_PATH), run with or without LD_PRELOAD.
 *
 *   cuda_driver oom                       fill to the limit, then one byte more
 *   cuda_driver storm THREADS ITERS MAXB SEED [keep|mixed]   concurrent alloc/free storm; "keep": exit
 *                                         still holding what each thread holds at the end; "mixed": also
 *                                         VMM (create, map, release; unmap later), cuMemAllocAsync and an
 *                                         explicit pool, freed in stream order with occasional syncs
 *   cuda_driver waitalloc BYTES           retry cuMemAlloc until admitted; print WAITING, then ADMITTED <ns>
 *   cuda_driver hold BYTES                allocate, print READY, sleep
 *   cuda_driver devices                   "devices N", then "dev<i> <MiB>" per ordinal (cuInit's rc if it fails)
 *   cuda_driver tries N BYTES             N allocations of BYTES (admitted ones kept); print "refused K"
 *   cuda_driver launch KIND US SECS DEVS  launch loop; KIND = kernel|ex|coop|graph; DEVS = "0" or "0,1";
 *                                         SECS 0: until SIGTERM (launch_loop.h)
 *   cuda_driver lookup BYTES              allocate BYTES through dlsym / cuGetProcAddress pointers
 *   cuda_driver bench N                   ns per alloc+free pair and per empty launch
 *   cuda_driver allocbench N BYTES        ns per cuMemAlloc_v2+cuMemFree_v2 pair of BYTES
 *   cuda_driver churn MS MAXB SEED        2 threads allocate and free at random for MS ms, then exit
 *   cuda_driver chaos RUNS WORKERS RUN_MS KILL_MS MAXB   chaos storms: in each run WORKERS churn
 *                                         processes (re-executed from this binary, with its environment)
 *                                         are SIGKILLed one every KILL_MS ms and replaced, RUN_MS/KILL_MS
 *                                         kills a run however slowly a loaded machine runs the loop; then
 *                                         the run winds down and any worker still alive 5 s after the last
 *                                         kill's replacement was due to end is hung.  Prints
 *                                         "runs=R kills=K hangs=H failed=F" (the parent makes no CUDA call)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hami_cuda_api.h"
#include "launch_loop.h"

void hamiFakeCudaSetKernelNs(uint64_t ns);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void use_device(int dev) {
    CUcontext ctx;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "no device %d\n", dev);
        exit(3);
    }
}

static int cmd_oom(void) {
    size_t free_b = 0, total_b = 0, devtotal = 0;
    int rc = cuMemGetInfo_v2(&free_b, &total_b);
    printf("meminfo rc=%d free=%zu total=%zu\n", rc, free_b, total_b);
    cuDeviceTotalMem_v2(&devtotal, 0);
    printf("devtotal %zu\n", devtotal);
    /* Fill exactly to the reported free amount in 1 MiB steps plus a remainder. */
    size_t left = free_b, done = 0;
    while (left > 0) {
        size_t chunk = left > (1u << 20) ? (1u << 20) : left;
        CUdeviceptr p;
        rc = cuMemAlloc_v2(&p, chunk);
        if (rc != CUDA_SUCCESS) break;
        left -= chunk;
        done += chunk;
    }
    printf("filled %zu rc=%d\n", done, rc);
    CUdeviceptr extra;
    printf("one_more rc=%d\n", cuMemAlloc_v2(&extra, 1));
    cuMemGetInfo_v2(&free_b, &total_b);
    printf("after free=%zu total=%zu\n", free_b, total_b);
    /* Other allocation entry points hit the same limit. */
    size_t pitch;
    printf("pitch rc=%d\n", cuMemAllocPitch_v2(&extra, &pitch, 64, 1, 4));
    printf("managed rc=%d\n", cuMemAllocManaged(&extra, 1, CU_MEM_ATTACH_GLOBAL));
    printf("async rc=%d\n", cuMemAllocAsync(&extra, 1, NULL));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    printf("create rc=%d\n", cuMemCreate(&h, 1, &prop, 0));
    return 0;
}

struct storm_args { int iters; size_t maxb; unsigned seed; int keep, mixed; long ok, oom; };

/* Every thread makes its first driver call at once: the first calls of a process race hardest. */
static pthread_barrier_t g_storm_start;
static CUmemoryPool g_storm_pool;

enum { PLAIN, ASYNC, FROM_POOL, VMM, KINDS };

struct held { CUdeviceptr p; size_t n; int kind; };

static int storm_alloc(struct held *h, size_t n, int kind, CUstream s) {
    h->kind = kind;
    h->n = n;
    if (kind == ASYNC) return cuMemAllocAsync(&h->p, n, s);
    if (kind == FROM_POOL) return cuMemAllocFromPoolAsync(&h->p, n, g_storm_pool, s);
    if (kind != VMM) return cuMemAlloc_v2(&h->p, n);
    /* create -> reserve -> map -> release: the mapping alone keeps the memory until the unmap. */
    size_t g = 2u << 20;
    h->n = (n + g - 1) / g * g;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle handle;
    int rc = cuMemCreate(&handle, h->n, &prop, 0);
    if (rc != CUDA_SUCCESS) return rc;
    if (cuMemAddressReserve(&h->p, h->n, 0, 0, 0) != CUDA_SUCCESS || cuMemMap(h->p, h->n, 0, handle, 0) != CUDA_SUCCESS ||
        cuMemRelease(handle) != CUDA_SUCCESS) {
        fprintf(stderr, "vmm setup failed\n");
        exit(4);
    }
    return CUDA_SUCCESS;
}

static int storm_free(struct held *h, CUstream s) {
    int rc;
    if (h->kind == VMM) rc = cuMemUnmap(h->p, h->n) || cuMemAddressFree(h->p, h->n);
    else if (h->kind == PLAIN) rc = cuMemFree_v2(h->p);
    else rc = cuMemFreeAsync(h->p, s);
    h->p = 0;
    return rc;
}

static void *storm_thread(void *arg) {
    struct storm_args *a = arg;
    struct held held[4];
    memset(held, 0, sizeof held);
    use_device(0);
    CUstream s = NULL;
    if (a->mixed && cuStreamCreate(&s, 0) != CUDA_SUCCESS) { fprintf(stderr, "no stream\n"); exit(4); }
    pthread_barrier_wait(&g_storm_start);
    for (int i = 0; i < a->iters; i++) {
        int k = (int)(rand_r(&a->seed) % 4);
        if (held[k].p) {
            if (storm_free(&held[k], s) != CUDA_SUCCESS) { fprintf(stderr, "free failed\n"); exit(4); }
            if (a->mixed && i % 16 == 0) cuStreamSynchronize(s); /* where stream-ordered frees land */
        } else {
            size_t n = 1 + (size_t)rand_r(&a->seed) % a->maxb;
            int kind = a->mixed ? (int)(rand_r(&a->seed) % KINDS) : (i % 3 == 0 ? ASYNC : PLAIN);
            int rc = storm_alloc(&held[k], n, kind, s);
            if (rc == CUDA_SUCCESS) a->ok++;
            else if (rc == CUDA_ERROR_OUT_OF_MEMORY) { a->oom++; held[k].p = 0; }
            else { fprintf(stderr, "alloc rc=%d kind=%d\n", rc, kind); exit(4); }
        }
    }
    if (!a->keep) {
        for (int k = 0; k < 4; k++) if (held[k].p) storm_free(&held[k], s);
        /* The cuMemAllocAsync pool keeps freed memory until a synchronisation, as a program's does. */
        cuCtxSynchronize();
    }
    return NULL;
}

static int cmd_storm(int threads, int iters, size_t maxb, unsigned seed, int keep, int mixed) {
    pthread_t t[64];
    struct storm_args a[64];
    if (threads < 1 || threads > 64) return 2;
    if (mixed) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        if (cuMemPoolCreate(&g_storm_pool, &props) != CUDA_SUCCESS) return 4;
    }
    pthread_barrier_init(&g_storm_start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        a[i] = (struct storm_args){iters, maxb, seed * 131u + (unsigned)i, keep, mixed, 0, 0};
        pthread_create(&t[i], NULL, storm_thread, &a[i]);
    }
    long ok = 0, oom = 0;
    for (int i = 0; i < threads; i++) { pthread_join(t[i], NULL); ok += a[i].ok; oom += a[i].oom; }
    if (mixed && !keep) cuMemPoolDestroy(g_storm_pool);
    printf("ok=%ld oom=%ld\n", ok, oom);
    return 0;
}

static int cmd_waitalloc(size_t bytes) {
    CUdeviceptr p;
    int rc = cuMemAlloc_v2(&p, bytes);
    if (rc == CUDA_SUCCESS) { printf("ADMITTED 0\n"); return 0; }
    printf("WAITING rc=%d\n", rc);
    fflush(stdout);
    while ((rc = cuMemAlloc_v2(&p, bytes)) == CUDA_ERROR_OUT_OF_MEMORY) sched_yield(); /* retry, not starve */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("ADMITTED %lld rc=%d\n", (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec, rc);
    return 0;
}

/* The devices this process sees, in ordinal order, each by its memory in MiB. */
static int cmd_devices(void) {
    int n = 0;
    cuDeviceGetCount(&n);
    printf("devices %d\n", n);
    for (int i = 0; i < n; i++) {
        size_t total = 0;
        cuDeviceTotalMem_v2(&total, i);
        printf("dev%d %zu\n", i, total >> 20);
    }
    return 0;
}

/* N allocations of BYTES each (those admitted are kept): how many the driver refused. */
static int cmd_tries(long n, size_t bytes) {
    long refused = 0;
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, bytes) == CUDA_ERROR_OUT_OF_MEMORY) refused++;
    }
    printf("refused %ld\n", refused);
    return 0;
}

static int cmd_hold(size_t bytes) {
    CUdeviceptr p;
    int rc = cuMemAlloc_v2(&p, bytes);
    printf("READY rc=%d\n", rc);
    fflush(stdout);
    for (;;) pause();
    return 0;
}

struct launch_args { const char *kind; uint64_t ns; double secs; int dev; long n; int rc; };

static void *launch_thread(void *arg) {
    struct launch_args *a = arg;
    use_device(a->dev);
    hamiFakeCudaSetKernelNs(a->ns);
    CUfunction f = NULL;
    CUmodule m;
    cuModuleLoadData(&m, "fake");
    cuModuleGetFunction(&f, m, "k");
    CUgraph g;
    CUgraphExec ge;
    cuGraphCreate(&g, 0);
    cuGraphInstantiateWithFlags(&ge, g, 0);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    double until = launch_loop_until(a->secs);
    while (launch_loop_on(until)) {
        int rc;
        if (!strcmp(a->kind, "ex")) rc = cuLaunchKernelEx(&cfg, f, NULL, NULL);
        else if (!strcmp(a->kind, "coop")) rc = cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL);
        else if (!strcmp(a->kind, "graph")) rc = cuGraphLaunch(ge, NULL);
        else rc = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        if (rc != CUDA_SUCCESS) { a->rc = rc; break; }
        a->n++;
    }
    return NULL;
}

static int cmd_launch(const char *kind, uint64_t us, double secs, const char *devs) {
    pthread_t t[16];
    struct launch_args a[16];
    int n = 0;
    for (const char *p = devs; *p && n < 16;) {
        a[n] = (struct launch_args){kind, us * 1000ull, secs, atoi(p), 0, 0};
        pthread_create(&t[n], NULL, launch_thread, &a[n]);
        n++;
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        printf("device %d launches %ld rc=%d\n", a[i].dev, a[i].n, a[i].rc);
        bad |= a[i].rc;
    }
    return bad ? 5 : 0;
}

static int cmd_lookup(size_t over) {
    size_t free_b, total_b;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
    typedef CUresult (*info_fn)(size_t *, size_t *);
    typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    CUdeviceptr p;
    alloc_fn a = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    printf("dlsym_alloc rc=%d\n", a(&p, over));
    info_fn inf = (info_fn)dlsym(h, "cuMemGetInfo_v2");
    inf(&free_b, &total_b);
    printf("dlsym_info total=%zu\n", total_b);
    gpa2_fn gpa = (gpa2_fn)dlsym(h, "cuGetProcAddress_v2");
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    gpa("cuMemAlloc", &fn, 12000, 0, &st);
    printf("gpa_alloc rc=%d\n", ((alloc_fn)fn)(&p, over));
    gpa("cuMemGetInfo", &fn, 12000, 0, &st);
    ((info_fn)fn)(&free_b, &total_b);
    printf("gpa_info total=%zu\n", total_b);
    /* The runtime's habit: look cuGetProcAddress itself up, then use that. */
    void *gpa_again = NULL;
    gpa("cuGetProcAddress", &gpa_again, 12000, 0, &st);
    ((gpa2_fn)gpa_again)("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    printf("gpa_gpa_alloc rc=%d\n", ((alloc_fn)fn)(&p, over));
    fn = NULL;
    cuGetProcAddress("cuMemAlloc", &fn, 11000, 0);
    printf("gpa_v1_alloc rc=%d\n", fn ? (int)((alloc_fn)fn)(&p, over) : -1);
    fn = NULL;
    gpa("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    Dl_info info;
    printf("gpa_launch_ptsz_in %s\n", fn && dladdr(fn, &info) && info.dli_fname ? strrchr(info.dli_fname, '/') + 1 : "?");
    return 0;
}

static double elapsed_ns(double t0, long n) { return (now_s() - t0) * 1e9 / (double)n; }

static int cmd_allocbench(long n, size_t bytes) {
    CUdeviceptr p;
    for (long i = 0; i < 100; i++) {
        if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) return 6;
    }
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) return 6;
    }
    printf("{\"alloc_free_ns\": %.1f}\n", elapsed_ns(t0, n));
    return 0;
}

static int cmd_bench(long n) {
    CUdeviceptr p;
    for (long i = 0; i < 1000; i++) { cuMemAlloc_v2(&p, 4096); cuMemFree_v2(p); } /* warm up */
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) return 6;
    }
    double alloc_ns = elapsed_ns(t0, n);
    hamiFakeCudaSetKernelNs(0);
    CUfunction f = NULL;
    for (long i = 0; i < 1000; i++) cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    t0 = now_s();
    for (long i = 0; i < n * 4; i++) cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    double launch_ns = elapsed_ns(t0, n * 4);
    printf("{\"alloc_free_ns\": %.1f, \"launch_ns\": %.2f}\n", alloc_ns, launch_ns);
    return 0;
}

struct churn_args { double until; size_t maxb; unsigned seed; int bad; };

static void *churn_thread(void *arg) {
    struct churn_args *a = arg;
    use_device(0);
    CUdeviceptr held[4] = {0};
    while (now_s() < a->until) {
        int k = (int)(rand_r(&a->seed) % 4);
        if (held[k]) {
            if (cuMemFree_v2(held[k]) != CUDA_SUCCESS) a->bad = 1;
            held[k] = 0;
        } else {
            int rc = cuMemAlloc_v2(&held[k], 1 + (size_t)rand_r(&a->seed) % a->maxb);
            if (rc != CUDA_SUCCESS) held[k] = 0;
            if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY) a->bad = 1;
        }
    }
    for (int k = 0; k < 4; k++) if (held[k]) cuMemFree_v2(held[k]);
    return NULL;
}

static int cmd_churn(long ms, size_t maxb, unsigned seed) {
    pthread_t t[2];
    struct churn_args a[2];
    double until = now_s() + (double)ms / 1e3;
    for (int i = 0; i < 2; i++) {
        a[i] = (struct churn_args){until, maxb, seed * 7u + (unsigned)i, 0};
        pthread_create(&t[i], NULL, churn_thread, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < 2; i++) { pthread_join(t[i], NULL); bad |= a[i].bad; }
    return bad ? 4 : 0;
}

static char g_self[4096];

static pid_t spawn_churn(long ms, size_t maxb, unsigned seed) {
    char a_ms[32], a_maxb[32], a_seed[32];
    snprintf(a_ms, sizeof a_ms, "%ld", ms);
    snprintf(a_maxb, sizeof a_maxb, "%zu", maxb);
    snprintf(a_seed, sizeof a_seed, "%u", seed);
    pid_t pid = fork();
    if (pid == 0) {
        execl(g_self, g_self, "churn", a_ms, a_maxb, a_seed, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmd_chaos(int runs, int workers, long run_ms, long kill_ms, size_t maxb) {
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0 || workers < 1 || workers > 64 || kill_ms < 1) return 2;
    g_self[n] = '\0';
    unsigned seed = (unsigned)getpid();
    long kills = 0, hangs = 0, failed = 0, per_run = run_ms / kill_ms > 0 ? run_ms / kill_ms : 1;
    pid_t live[64];
    for (int run = 0; run < runs; run++) {
        double end = now_s() + (double)run_ms / 1e3, last_end = end;
        for (int i = 0; i < workers; i++) live[i] = spawn_churn(run_ms, maxb, rand_r(&seed));
        /* Counted kills, not a timed spell: on a loaded machine the naps run long and a timed run
         * would kill less.  Each kill lands on a live worker; a replacement lives a few kill
         * intervals at least, so that there is someone to kill when the run's time is up. */
        for (long done = 0; done < per_run;) {
            nap_ms(kill_ms);
            int i = (int)(rand_r(&seed) % (unsigned)workers);
            int status;
            if (waitpid(live[i], &status, WNOHANG) == 0) {
                kill(live[i], SIGKILL);
                waitpid(live[i], &status, 0);
                kills++;
                done++;
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                failed++;
            }
            long left = (long)((end - now_s()) * 1e3);
            if (left < 4 * kill_ms) left = 4 * kill_ms;
            live[i] = spawn_churn(left, maxb, rand_r(&seed));
            if (now_s() + (double)left / 1e3 > last_end) last_end = now_s() + (double)left / 1e3;
        }
        /* Wind down: every worker ends on its own shortly after its time is up, unless it hangs. */
        double deadline = last_end + 5.0;
        for (int i = 0; i < workers; i++) {
            int status;
            pid_t got;
            while ((got = waitpid(live[i], &status, WNOHANG)) == 0 && now_s() < deadline) nap_ms(1);
            if (got == 0) {
                hangs++;
                fprintf(stderr, "run %d: worker %d still alive 5 s after its time was up\n", run, (int)live[i]);
                kill(live[i], SIGKILL);
                waitpid(live[i], &status, 0);
            } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                failed++;
            }
        }
    }
    printf("runs=%d kills=%ld hangs=%ld failed=%ld\n", runs, kills, hangs, failed);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "chaos") && argc >= 7) /* the parent only forks, kills and waits */
        return cmd_chaos(atoi(argv[2]), atoi(argv[3]), atol(argv[4]), atol(argv[5]), strtoull(argv[6], NULL, 10));
    int rc = cuInit(0);
    if (rc != CUDA_SUCCESS) {
        printf("cuInit rc=%d\n", rc);
        return 7;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "devices")) return cmd_devices();
    if (strcmp(cmd, "launch") != 0) use_device(0);
    if (!strcmp(cmd, "oom")) return cmd_oom();
    if (!strcmp(cmd, "storm") && argc >= 6)
        return cmd_storm(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10), (unsigned)atoi(argv[5]),
                         argc >= 7 && !strcmp(argv[6], "keep"), argc >= 7 && !strcmp(argv[6], "mixed"));
    if (!strcmp(cmd, "waitalloc") && argc >= 3) return cmd_waitalloc(strtoull(argv[2], NULL, 10));
    if (!strcmp(cmd, "hold") && argc >= 3) return cmd_hold(strtoull(argv[2], NULL, 10));
    if (!strcmp(cmd, "tries") && argc >= 4) return cmd_tries(atol(argv[2]), strtoull(argv[3], NULL, 10));
    if (!strcmp(cmd, "launch") && argc >= 6) return cmd_launch(argv[2], strtoull(argv[3], NULL, 10), atof(argv[4]), argv[5]);
    if (!strcmp(cmd, "lookup") && argc >= 3) return cmd_lookup(strtoull(argv[2], NULL, 10));
    if (!strcmp(cmd, "bench") && argc >= 3) return cmd_bench(atol(argv[2]));
    if (!strcmp(cmd, "allocbench") && argc >= 4) return cmd_allocbench(atol(argv[2]), strtoull(argv[3], NULL, 10));
    if (!strcmp(cmd, "churn") && argc >= 5)
        return cmd_churn(atol(argv[2]), strtoull(argv[3], NULL, 10), (unsigned)atoi(argv[4]));
    return 2;
}
