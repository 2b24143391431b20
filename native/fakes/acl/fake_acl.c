/* A fake Ascend ACL runtime (libascendcl.so) for tests: devices selected per
 * thread with aclrtSetDevice, HBM with a capacity, and kernels on the shared
 * virtual timeline of hami_fake_gpu.h. */
#define _GNU_SOURCE
#include "fake_runtime.h"
#include "hami_acl_api.h"

#define EXPORT __attribute__((visibility("default")))

/* Device id -> fake-state device: ASCEND_RT_VISIBLE_DEVICES (or the pin HAMI_FAKE_ASCEND_VISIBLE_DEVICES),
 * see hami_fake_visible.h. */
static const hami_fake_runtime_spec *hami_fake_runtime_of_library(void) {
    static const hami_fake_runtime_spec spec = {.vendor = "ASCEND",
                                                .visible_var = "ASCEND_RT_VISIBLE_DEVICES",
                                                .first_address = 0x600000000000ull};
    return &spec;
}

static __thread int t_dev = -1;

static int ready(void) { return hami_fake_rt_ready(); }

EXPORT void hamiFakeAclSetKernelNs(uint64_t ns) { hami_fake_rt_set_kernel_ns(ns); }

EXPORT aclError aclInit(const char *configPath) { return ready() ? ACL_SUCCESS : ACL_ERROR_UNINITIALIZE; }
EXPORT aclError aclFinalize(void) { return ACL_SUCCESS; }

EXPORT aclError aclrtGetDeviceCount(uint32_t *count) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    *count = (uint32_t)hami_fake_rt.count;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSetDevice(int32_t deviceId) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (deviceId < 0 || deviceId >= hami_fake_rt.count) return ACL_ERROR_INVALID_PARAM;
    t_dev = deviceId;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtResetDevice(int32_t deviceId) { return ACL_SUCCESS; }

EXPORT aclError aclrtGetDevice(int32_t *deviceId) {
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    *deviceId = t_dev;
    return ACL_SUCCESS;
}

static aclError do_alloc(void **devPtr, size_t size) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    if (!devPtr || size == 0) return ACL_ERROR_INVALID_PARAM;
    uint64_t addr;
    if (hami_fake_rt_alloc(t_dev, size, &addr) != 0) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    *devPtr = (void *)(uintptr_t)addr;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) { return do_alloc(devPtr, size); }
EXPORT aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    return do_alloc(devPtr, size);
}
EXPORT aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    return do_alloc(devPtr, size);
}

EXPORT aclError aclrtFree(void *devPtr) {
    if (!ready() || hami_fake_rt_free((uint64_t)(uintptr_t)devPtr) != 0) return ACL_ERROR_INVALID_PARAM;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_, size_t *total) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    hami_fake_rt_mem_info(t_dev, free_, total);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t blockDim, const void *argsData,
                                  size_t argsSize, aclrtStream stream) {
    if (!ready()) return ACL_ERROR_UNINITIALIZE;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    hami_fake_rt_run_kernel(t_dev);
    return ACL_SUCCESS;
}

EXPORT aclError aclrtCreateStream(aclrtStream *stream) {
    *stream = (aclrtStream)(uintptr_t)1;
    return ACL_SUCCESS;
}

EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
    if (ready() && t_dev >= 0) hami_fake_rt_synchronize(t_dev);
    return ACL_SUCCESS;
}
