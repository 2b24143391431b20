/* A compute workload for the compute-share tests and bench/compute_share.py, on the fake CUDA driver
 * (kernel durations come from the kernel's name: fake_cuda.c's registry).
 *
 *   compute_load KIND SECS     SECS 0: until SIGTERM (launch_loop.h)
 *
 * KIND:
 *   tiny     2 us kernels launched back to back (PyTorch's `add_` on 16 floats on an H200: launch-bound)
 *   medium   57 us kernels (a 1024x1024 fp32 matmul: 17,550 per second bare)
 *   big      2,680 us kernels (a 4096x4096 fp32 matmul: 373 per second bare)
 *   decode   token by token: 20 kernels of 4 to 120 us, then a synchronize (the host reads the token)
 *   us:N     N-microsecond kernels
 * Prints "launches N tokens N" when it ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hami_cuda_api.h"
#include "launch_loop.h"

static const unsigned DECODE_US[] = {4, 12, 40, 120, 40, 8, 4, 12, 40, 120, 40, 8, 4, 12, 40, 120, 40, 8, 30, 6};

static CUfunction kernel(unsigned us) {
    char name[64];
    snprintf(name, sizeof name, "hami_fake_kernel_%uus", us);
    CUmodule m;
    CUfunction f = NULL;
    if (cuModuleLoadData(&m, "fake") != CUDA_SUCCESS || cuModuleGetFunction(&f, m, name) != CUDA_SUCCESS) {
        fprintf(stderr, "no kernel %s\n", name);
        exit(3);
    }
    return f;
}

static int launch(CUfunction f) {
    return cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS ? 0 : 4;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: compute_load tiny|medium|big|decode|us:N SECS\n");
        return 2;
    }
    const char *kind = argv[1];
    double until = launch_loop_until(atof(argv[2]));
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    long launches = 0, tokens = 0;
    int rc = 0;
    if (!strcmp(kind, "decode")) {
        size_t n = sizeof DECODE_US / sizeof DECODE_US[0];
        CUfunction fs[sizeof DECODE_US / sizeof DECODE_US[0]];
        for (size_t i = 0; i < n; i++) fs[i] = kernel(DECODE_US[i]);
        while (!rc && launch_loop_on(until)) {
            for (size_t i = 0; i < n && !rc; i++, launches++) rc = launch(fs[i]);
            if (!rc && cuCtxSynchronize() != CUDA_SUCCESS) rc = 4;
            tokens++;
        }
    } else {
        unsigned us = !strcmp(kind, "tiny") ? 2 : !strcmp(kind, "medium") ? 57 : !strcmp(kind, "big") ? 2680
                      : !strncmp(kind, "us:", 3)                      ? (unsigned)atoi(kind + 3)
                                                                       : 0;
        if (!us) {
            fprintf(stderr, "unknown kind %s\n", kind);
            return 2;
        }
        CUfunction f = kernel(us);
        while (!rc && launch_loop_on(until)) {
            rc = launch(f);
            launches++;
        }
    }
    printf("launches %ld tokens %ld rc=%d\n", launches, tokens, rc);
    return rc;
}
