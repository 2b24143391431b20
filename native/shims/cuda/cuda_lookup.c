/* Symbol lookups.  The CUDA runtime does not link driver functions; it asks
 * cuGetProcAddress for them (and some frameworks use dlsym).  Both must hand
 * out the shim's wrappers or the limits are silently bypassed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuda_shim.h"

#define HAMI_ENTRY(name) {#name, (void *)name, (void **)&hami_real.name},
static const struct {
    const char *name;
    void *wrapper;
    void **real;
} WRAPPERS[] = {HAMI_CUDA_WRAPPED(HAMI_ENTRY)};
#define N_WRAPPERS (sizeof WRAPPERS / sizeof WRAPPERS[0])

void *hami_cuda_wrapper_for(const char *name) {
    if (!name || name[0] != 'c' || name[1] != 'u') return NULL;
    for (size_t i = 0; i < N_WRAPPERS; i++)
        if (strcmp(WRAPPERS[i].name, name) == 0) return WRAPPERS[i].wrapper;
    return NULL;
}

void *hami_cuda_wrapper_for_real(void *real) {
    for (size_t i = 0; i < N_WRAPPERS; i++)
        if (*WRAPPERS[i].real && *WRAPPERS[i].real == real) return WRAPPERS[i].wrapper;
    return NULL;
}

/* Base names whose current ABI is the _v2 entry point (since CUDA 3.2). */
static const char *const V2_NAMES[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                                       "cuDeviceTotalMem", "cuArrayCreate", "cuArray3DCreate", NULL};

static void *by_name(const char *symbol, int version, cuuint64_t flags) {
    char name[128];
    if (strcmp(symbol, "cuGetProcAddress") == 0)
        return hami_cuda_wrapper_for(version >= 12000 ? "cuGetProcAddress_v2" : "cuGetProcAddress");
    if (strcmp(symbol, "cuCtxSynchronize") == 0) /* CUDA 13 gives the context-taking variant */
        return hami_cuda_wrapper_for(version >= 13000 ? "cuCtxSynchronize_v2" : "cuCtxSynchronize");
    if (strcmp(symbol, "cuGraphInstantiate") == 0)
        return hami_cuda_wrapper_for(version >= 12000 ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate_v2");
    for (const char *const *n = V2_NAMES; *n; n++) {
        if (strcmp(symbol, *n) == 0) {
            if (version < 3020) return hami_cuda_wrapper_for(symbol); /* the v1 entry point of the 32-bit ABI */
            snprintf(name, sizeof name, "%s_v2", symbol);
            return hami_cuda_wrapper_for(name);
        }
    }
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(name, sizeof name, "%s_ptsz", symbol);
        void *w = hami_cuda_wrapper_for(name);
        if (w) return w;
    }
    return hami_cuda_wrapper_for(symbol);
}

static void swap_in_wrapper(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    if (!pfn || !*pfn) return;
    /* Prefer matching the pointer the driver returned (exact variant), and
     * fall back on the name for drivers that return internal addresses. */
    void *w = hami_cuda_wrapper_for_real(*pfn);
    if (!w && symbol) w = by_name(symbol, version, flags);
    if (w) *pfn = w;
}

HAMI_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuGetProcAddress_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = hami_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS) swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

HAMI_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuGetProcAddress)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = hami_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS) swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

/* dlsym(handle, "cuMemAlloc_v2") on the driver returns the wrapper.  Only
 * names the real lookup finds are redirected, so a handle without CUDA
 * symbols still gets NULL.  (dlsym(RTLD_NEXT, ...) from the application is
 * resolved relative to this shim, the one case this cannot forward exactly.) */
HAMI_EXPORT void *dlsym(void *handle, const char *symbol) {
    void *found = hami_real_dlsym(handle, symbol);
    if (found && symbol[0] == 'c' && symbol[1] == 'u') {
        void *w = hami_cuda_wrapper_for(symbol);
        if (w) {
            hami_cuda_ensure();
            return w;
        }
    }
    /* NVML memory queries (nvidia-smi and pynvml look NVML up rather than link it). */
    if (found && symbol[0] == 'n' && !strncmp(symbol, "nvml", 4)) {
        void *w = hami_nvml_wrapper_for(symbol);
        if (w) return w;
    }
    return found;
}
