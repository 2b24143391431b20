/* Which device a stream belongs to.  cuMemAllocAsync allocates from the pool
 * of the *stream's* device, which need not be the current context's. */
#define _GNU_SOURCE
#include "cuda_shim.h"

int hami_cuda_stream_device(CUstream s) {
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return hami_cuda_current_device();
    CUdevice d;
    if (hami_real.cuStreamGetDevice && hami_real.cuStreamGetDevice(s, &d) == CUDA_SUCCESS) return d;
    /* Drivers before cuStreamGetDevice (CUDA 12.8): through the stream's context. */
    CUcontext ctx;
    if (!hami_real.cuStreamGetCtx || hami_real.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS)
        return hami_cuda_current_device();
    if (hami_real.cuCtxGetDevice_v2 && hami_real.cuCtxGetDevice_v2(&d, ctx) == CUDA_SUCCESS) return d;
    if (hami_real.cuCtxPushCurrent_v2 && hami_real.cuCtxPopCurrent_v2 &&
        hami_real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
        int dev = hami_cuda_current_device();
        CUcontext popped;
        hami_real.cuCtxPopCurrent_v2(&popped);
        return dev;
    }
    return hami_cuda_current_device();
}
