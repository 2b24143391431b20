/* Launch wrappers: when a device of this allocation has a compute limit, wait
 * for the device's token bucket before handing the launch to the driver.
 * Graph and cooperative launches go through the same bucket. */
#define _GNU_SOURCE
#include "cuda_shim.h"

static inline void gate(void) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(hami_shim_compute_limited())) hami_shim_throttle(hami_cuda_current_device());
}

HAMI_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                    unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                                    void **extra) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernel)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

HAMI_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                         unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                         CUstream s, void **params, void **extra) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernel_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

HAMI_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernelEx)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchKernelEx(config, f, params, extra);
}

HAMI_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                           void **extra) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernelEx_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchKernelEx_ptsz(config, f, params, extra);
}

HAMI_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                               CUstream s, void **params) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchCooperativeKernel)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params);
}

HAMI_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                    unsigned int gz, unsigned int bx, unsigned int by,
                                                    unsigned int bz, unsigned int shm, CUstream s, void **params) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchCooperativeKernel_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params);
}

HAMI_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuGraphLaunch)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuGraphLaunch(hGraphExec, hStream);
}

HAMI_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    gate();
    if (HAMI_UNLIKELY(!hami_real.cuGraphLaunch_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    return hami_real.cuGraphLaunch_ptsz(hGraphExec, hStream);
}
