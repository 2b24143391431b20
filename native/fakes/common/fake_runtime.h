/*
 * What every fake runtime (libcuda, libascendcl, libcndrv, libcnrt) starts from: the shared
 * fake-device state (hami_fake_gpu.h) mapped once, the devices its visible-devices variable shows
 * (hami_fake_visible.h), this process registered on a device the first time it uses it, and the
 * memory and kernel calls all of them answer alike.
 *
 * Header-only, and included by exactly one translation unit of a library: hami_fake_gpu.h keeps
 * the mapped state and this process's slot locks in statics of the translation unit that mapped
 * it, so every call that touches the books is made from there.  The includer defines
 * hami_fake_runtime_of_library() (below), which says whose runtime it is.
 */
#ifndef HAMI_FAKE_RUNTIME_H
#define HAMI_FAKE_RUNTIME_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "hami_fake_gpu.h"
#include "hami_fake_visible.h"
#include "ptrmap.h"

typedef struct hami_fake_runtime_spec {
    const char *vendor;        /* its HAMI_FAKE_<VENDOR>_* variables: CUDA, ASCEND, CAMBRICON */
    const char *visible_var;   /* the real runtime's list: CUDA_VISIBLE_DEVICES, ... */
    hami_fake_uuid_fn uuid_of; /* how the list's UUID entries are matched; NULL: indices only */
    uint64_t first_address;    /* where its device addresses start (each runtime its own range) */
    void (*attached)(void);    /* its own start, once the state is mapped; or NULL */
    void (*after_fork)(void);  /* its own reset in a forked child; or NULL */
} hami_fake_runtime_spec;

/* Defined by the includer. */
static const hami_fake_runtime_spec *hami_fake_runtime_of_library(void);

static struct {
    hami_fake_gpu_state *state;
    int order[HAMI_FAKE_GPU_MAX_DEVICES];             /* visible ordinal -> state device */
    int count;                                        /* devices visible */
    hami_fake_proc *procs[HAMI_FAKE_GPU_MAX_DEVICES]; /* this process's slot, per visible ordinal */
    hami_ptrmap ptrs;                                 /* device address -> its bytes and ordinal */
    uint64_t next_address;                            /* never reused: a stale free cannot hit a new block */
    uint64_t default_kernel_ns;
} hami_fake_rt;

static pthread_once_t hami_fake_rt_once = PTHREAD_ONCE_INIT;
static __thread uint64_t hami_fake_rt_thread_kernel_ns = UINT64_MAX;

static inline void hami_fake_rt_after_fork_child(void) {
    memset(hami_fake_rt.procs, 0, sizeof hami_fake_rt.procs); /* the child registers as itself */
    hami_ptrmap_after_fork(&hami_fake_rt.ptrs);
    const hami_fake_runtime_spec *spec = hami_fake_runtime_of_library();
    if (spec->after_fork) spec->after_fork();
}

static inline void hami_fake_rt_attach(void) {
    const hami_fake_runtime_spec *spec = hami_fake_runtime_of_library();
    hami_fake_rt.state = hami_fake_gpu_attach(spec->vendor);
    if (hami_fake_rt.state)
        hami_fake_rt.count = hami_fake_visible(spec->vendor, spec->visible_var, hami_fake_rt.state->device_count,
                                               spec->uuid_of, hami_fake_rt.order, HAMI_FAKE_GPU_MAX_DEVICES);
    hami_fake_rt.next_address = spec->first_address;
    hami_fake_rt.default_kernel_ns = hami_fake_default_kernel_ns();
    if (spec->attached) spec->attached();
    pthread_atfork(NULL, NULL, hami_fake_rt_after_fork_child);
}

/* Whether the state is mapped (the first call of any entry point maps it). */
static inline int hami_fake_rt_ready(void) {
    pthread_once(&hami_fake_rt_once, hami_fake_rt_attach);
    return hami_fake_rt.state != NULL;
}

static inline hami_fake_device *hami_fake_rt_device(int ordinal) {
    return &hami_fake_rt.state->devices[hami_fake_rt.order[ordinal]];
}

/* This process's slot on a device, taken the first time it is asked for. */
static inline hami_fake_proc *hami_fake_rt_proc(int ordinal) {
    hami_fake_proc *p = __atomic_load_n(&hami_fake_rt.procs[ordinal], __ATOMIC_ACQUIRE);
    if (!p) {
        p = hami_fake_proc_slot(hami_fake_rt_device(ordinal), (int32_t)getpid());
        __atomic_store_n(&hami_fake_rt.procs[ordinal], p, __ATOMIC_RELEASE);
    }
    return p;
}

/* The duration of this thread's next kernels (UINT64_MAX: the default, HAMI_FAKE_KERNEL_US). */
static inline void hami_fake_rt_set_kernel_ns(uint64_t ns) { hami_fake_rt_thread_kernel_ns = ns; }

static inline uint64_t hami_fake_rt_kernel_ns(void) {
    return hami_fake_rt_thread_kernel_ns != UINT64_MAX ? hami_fake_rt_thread_kernel_ns
                                                       : hami_fake_rt.default_kernel_ns;
}

/* Takes bytes of a device for this process: 0, or -1 when even the memory of dead processes,
 * given back, leaves too little. */
static inline int hami_fake_rt_take(int ordinal, uint64_t bytes) {
    hami_fake_device *d = hami_fake_rt_device(ordinal);
    if (hami_fake_mem_take(d, hami_fake_rt_proc(ordinal), bytes) == 0) return 0;
    return hami_fake_reap_dead(d) > 0 && hami_fake_mem_take(d, hami_fake_rt_proc(ordinal), bytes) == 0 ? 0 : -1;
}

static inline void hami_fake_rt_give(int ordinal, uint64_t bytes) {
    hami_fake_mem_give(hami_fake_rt_device(ordinal), hami_fake_rt_proc(ordinal), bytes);
}

/* An allocation of bytes on a device at a fresh address: 0, or -1 when the device is full. */
static inline int hami_fake_rt_alloc(int ordinal, uint64_t bytes, uint64_t *address) {
    if (hami_fake_rt_take(ordinal, bytes) != 0) return -1;
    *address = __atomic_fetch_add(&hami_fake_rt.next_address, (bytes + 511) & ~511ull, __ATOMIC_RELAXED);
    hami_ptrmap_put(&hami_fake_rt.ptrs, *address, bytes, ordinal);
    return 0;
}

/* Frees what hami_fake_rt_alloc gave: 0, or -1 for an address it did not give (or gave back). */
static inline int hami_fake_rt_free(uint64_t address) {
    uint64_t bytes;
    int32_t ordinal;
    if (hami_ptrmap_take(&hami_fake_rt.ptrs, address, &bytes, &ordinal) != 0) return -1;
    hami_fake_rt_give(ordinal, bytes);
    return 0;
}

static inline void hami_fake_rt_mem_info(int ordinal, size_t *free_bytes, size_t *total_bytes) {
    hami_fake_device *d = hami_fake_rt_device(ordinal);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
    *total_bytes = d->total_bytes;
    *free_bytes = used < d->total_bytes ? d->total_bytes - used : 0;
}

/* A kernel of this thread's duration on the device's timeline (hami_fake_timeline.h). */
static inline void hami_fake_rt_run_kernel(int ordinal) {
    hami_fake_run_kernel(hami_fake_rt_device(ordinal), hami_fake_rt_proc(ordinal), hami_fake_rt_kernel_ns());
}

static inline void hami_fake_rt_synchronize(int ordinal) {
    hami_fake_synchronize(hami_fake_rt_device(ordinal), hami_fake_rt_proc(ordinal));
}

#endif
