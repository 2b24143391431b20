/* A framework backend as a shared library, for the RTLD_DEEPBIND tests: one
 * entry point, plugin_alloc(bytes), that allocates device memory the way the
 * build chose and returns the CUresult.
 *
 *   (default)        linked with -lcuda: calls cuMemAlloc_v2 directly
 *   -DBY_DLSYM       opens libcuda.so.1 itself and looks cuMemAlloc_v2 up with dlsym
 *   -DBY_PROC_ADDR   opens libcuda.so.1 and asks its cuGetProcAddress_v2 for cuMemAlloc */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "hami_cuda_api.h"

__attribute__((visibility("default"))) int plugin_alloc(size_t bytes) {
    CUdeviceptr p;
#if defined(BY_DLSYM) || defined(BY_PROC_ADDR)
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
#endif
#if defined(BY_DLSYM)
    __typeof__(&cuMemAlloc_v2) alloc = (__typeof__(&cuMemAlloc_v2))dlsym(h, "cuMemAlloc_v2");
    return alloc ? (int)alloc(&p, bytes) : -1;
#elif defined(BY_PROC_ADDR)
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(&cuGetProcAddress_v2))dlsym(h, "cuGetProcAddress_v2");
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (!gpa || gpa("cuMemAlloc", &fn, 12000, 0, &st) != CUDA_SUCCESS || !fn) return -1;
    return (int)((__typeof__(&cuMemAlloc_v2))fn)(&p, bytes);
#else
    return (int)cuMemAlloc_v2(&p, bytes);
#endif
}
