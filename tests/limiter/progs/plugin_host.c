/* Loads a plugin (tests/limiter/progs/cuda_plugin.c) as a framework loads its
 * backend, then has it allocate.  Built with RUNPATH=$ORIGIN/plugins, so a bare
 * plugin name is found only through this program's own search path.
 *
 *   plugin_host PLUGIN deep|plain BYTES   prints "load ok|<dlerror>" and "plugin_alloc rc=N" */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hami_cuda_api.h"

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 3;
    int flags = RTLD_NOW | RTLD_LOCAL | (strcmp(argv[2], "deep") == 0 ? RTLD_DEEPBIND : 0);
    void *h = dlopen(argv[1], flags);
    printf("load %s\n", h ? "ok" : dlerror());
    if (!h) return 0;
    int (*alloc)(size_t) = (int (*)(size_t))dlsym(h, "plugin_alloc");
    printf("plugin_alloc rc=%d\n", alloc ? alloc(strtoull(argv[3], NULL, 10)) : -1);
    return 0;
}
