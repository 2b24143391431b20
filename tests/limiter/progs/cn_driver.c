/* Test driver for the Cambricon shim, linked against the fake libcnrt.so and libcndrv.so.
 *   cn_driver devices cnrt|cndrv         "devices N", then "dev<i> <MiB>" per ordinal
 *   cn_driver oom cnrt|cndrv BYTES       fill to BYTES (the limit), then one byte more
 *   cn_driver launch cnrt|cndrv US SECS  launch loop (SECS 0: until SIGTERM) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hami_cndrv_api.h"
#include "hami_cnrt_api.h"
#include "launch_loop.h"

void hamiFakeCnrtSetKernelNs(uint64_t ns);
void hamiFakeCndrvSetKernelNs(uint64_t ns);

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "devices")) { /* the ordinals this process sees, each by its MiB */
        int drv = !strcmp(argv[2], "cndrv");
        unsigned int n = 0;
        int count = 0;
        if (drv ? cnInit(0) != CN_SUCCESS || cnDeviceGetCount(&count) != CN_SUCCESS
                : cnrtGetDeviceCount(&n) != cnrtSuccess)
            return 2;
        if (drv) n = (unsigned int)count;
        printf("devices %u\n", n);
        for (unsigned int i = 0; i < n; i++) {
            CNcontext ctx;
            if (drv ? cnCtxCreate(&ctx, 0, (CNdev)i) != CN_SUCCESS : cnrtSetDevice((int)i) != cnrtSuccess) return 3;
            cn_uint64_t f = 0, t = 0;
            size_t f2 = 0, t2 = 0;
            if (drv) cnMemGetInfo(&f, &t);
            else cnrtMemGetInfo(&f2, &t2), t = t2;
            printf("dev%u %llu\n", i, (unsigned long long)t >> 20);
        }
        return 0;
    }
    if (argc < 4) return 2;
    int drv = !strcmp(argv[2], "cndrv");
    CNcontext ctx;
    if (drv ? (cnInit(0) != CN_SUCCESS || cnCtxCreate(&ctx, 0, 0) != CN_SUCCESS) : cnrtSetDevice(0) != cnrtSuccess)
        return 2;
    if (!strcmp(argv[1], "oom")) {
        uint64_t want = strtoull(argv[3], NULL, 10);
        if (drv) {
            cn_uint64_t f = 0, t = 0;
            int mrc = cnMemGetInfo(&f, &t);
            printf("meminfo rc=%d free=%llu total=%llu\n", mrc, (unsigned long long)f, (unsigned long long)t);
            CNaddr a, b;
            printf("filled rc=%d\n", cnMalloc(&a, want));
            printf("one_more rc=%d\n", cnMalloc(&b, 1));
            printf("free rc=%d\n", cnFree(a));
            printf("again rc=%d\n", cnMalloc(&b, want));
        } else {
            size_t f = 0, t = 0;
            int mrc = cnrtMemGetInfo(&f, &t);
            printf("meminfo rc=%d free=%zu total=%zu\n", mrc, f, t);
            void *a, *b;
            printf("filled rc=%d\n", cnrtMalloc(&a, want));
            printf("one_more rc=%d\n", cnrtMalloc(&b, 1));
            printf("free rc=%d\n", cnrtFree(a));
            printf("again rc=%d\n", cnrtMalloc(&b, want));
        }
        return 0;
    }
    if (!strcmp(argv[1], "launch") && argc >= 5) {
        uint64_t ns = strtoull(argv[3], NULL, 10) * 1000ull;
        if (drv) hamiFakeCndrvSetKernelNs(ns); else hamiFakeCnrtSetKernelNs(ns);
        cnrtDim3_t dim = {1, 1, 1};
        double until = launch_loop_until(atof(argv[4]));
        long n = 0;
        while (launch_loop_on(until)) {
            int rc = drv ? (int)cnInvokeKernel(NULL, 1, 1, 1, CN_KERNEL_CLASS_BLOCK, 0, NULL, NULL, NULL)
                         : (int)cnrtInvokeKernel(NULL, dim, cnrtFuncTypeBlock, NULL, 0, NULL);
            if (rc != 0) return 5;
            n++;
        }
        printf("launches %ld\n", n);
        return 0;
    }
    return 2;
}
