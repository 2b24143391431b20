/* Test driver for the Ascend shim, linked against the fake libascendcl.so.
 *   acl_driver devices         "devices N", then "dev<i> <MiB>" per device id
 *   acl_driver oom BYTES       fill to BYTES (the limit), then one byte more
 *   acl_driver launch US SECS  launch loop of US-microsecond kernels (SECS 0: until SIGTERM) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hami_acl_api.h"
#include "launch_loop.h"

void hamiFakeAclSetKernelNs(uint64_t ns);

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && !strcmp(argv[1], "devices")) { /* the device ids this process sees, each by its MiB */
        uint32_t n = 0;
        if (aclInit(NULL) != ACL_SUCCESS || aclrtGetDeviceCount(&n) != ACL_SUCCESS) return 2;
        printf("devices %u\n", n);
        for (uint32_t i = 0; i < n; i++) {
            size_t free_b = 0, total_b = 0;
            if (aclrtSetDevice((int32_t)i) != ACL_SUCCESS) return 3;
            aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b);
            printf("dev%u %zu\n", i, total_b >> 20);
        }
        return 0;
    }
    if (argc < 3 || aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) return 2;
    if (!strcmp(argv[1], "oom")) {
        size_t want = strtoull(argv[2], NULL, 10), free_b = 0, total_b = 0;
        int mrc = aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b);
        printf("meminfo rc=%d free=%zu total=%zu\n", mrc, free_b, total_b);
        void *p, *q;
        int rc1 = aclrtMalloc(&p, want / 2, ACL_MEM_MALLOC_HUGE_FIRST);
        int rc2 = aclrtMallocCached(&q, want - want / 2, ACL_MEM_MALLOC_HUGE_FIRST);
        printf("filled rc=%d,%d\n", rc1, rc2);
        printf("one_more rc=%d\n", aclrtMalloc(&p, 1, ACL_MEM_MALLOC_NORMAL_ONLY));
        printf("align32 rc=%d\n", aclrtMallocAlign32(&p, 1, ACL_MEM_MALLOC_NORMAL_ONLY));
        printf("free rc=%d\n", aclrtFree(q));
        printf("again rc=%d\n", aclrtMalloc(&p, want - want / 2, ACL_MEM_MALLOC_HUGE_FIRST));
        return 0;
    }
    if (!strcmp(argv[1], "launch") && argc >= 4) {
        hamiFakeAclSetKernelNs(strtoull(argv[2], NULL, 10) * 1000ull);
        double until = launch_loop_until(atof(argv[3]));
        long n = 0;
        while (launch_loop_on(until)) {
            if (aclrtLaunchKernel(NULL, 1, NULL, 0, NULL) != ACL_SUCCESS) return 5;
            n++;
        }
        printf("launches %ld\n", n);
        return 0;
    }
    return 2;
}
