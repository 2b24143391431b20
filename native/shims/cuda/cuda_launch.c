/* Launch wrappers: when a device of this allocation has a compute limit, each launch passes the
 * pacer's gate first and is charged the device time it takes (cuda_pace.c).  Graph and cooperative
 * launches are paced the same way, a graph by its own timing.  Without a limit a launch costs two
 * loads more than the driver's. */
#define _GNU_SOURCE
#include "cuda_shim.h"

#define PACED(key, stream, call)                                                                       \
    do {                                                                                              \
        hami_cuda_ensure();                                                                           \
        if (HAMI_UNLIKELY(hami_shim_compute_limited())) {                                             \
            hami_cuda_pace_ticket t;                                                                  \
            hami_cuda_pace_begin(&t, (key), (stream));                                                \
            CUresult rc_ = (call);                                                                    \
            hami_cuda_pace_end(&t, rc_);                                                              \
            return rc_;                                                                               \
        }                                                                                             \
        return (call);                                                                                \
    } while (0)

/* A _ptsz launch on stream 0 runs on the per-thread default stream: its probes must be recorded there. */
static inline CUstream per_thread(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

static inline uint64_t config_key(const CUlaunchConfig *c, CUfunction f) {
    return c ? hami_cuda_shape_key(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                                   c->blockDimZ, c->sharedMemBytes)
             : 0;
}

HAMI_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                    unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                                    void **extra) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernel)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(f, gx, gy, gz, bx, by, bz, shm), s,
          hami_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

HAMI_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                         unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                         CUstream s, void **params, void **extra) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernel_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(f, gx, gy, gz, bx, by, bz, shm), per_thread(s),
          hami_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

HAMI_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernelEx)) return CUDA_ERROR_NOT_INITIALIZED;
    if (!config) return hami_real.cuLaunchKernelEx(config, f, params, extra);
    PACED(config_key(config, f), config->hStream, hami_real.cuLaunchKernelEx(config, f, params, extra));
}

HAMI_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                           void **extra) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchKernelEx_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    if (!config) return hami_real.cuLaunchKernelEx_ptsz(config, f, params, extra);
    PACED(config_key(config, f), per_thread(config->hStream),
          hami_real.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

HAMI_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                               CUstream s, void **params) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchCooperativeKernel)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(f, gx, gy, gz, bx, by, bz, shm), s,
          hami_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

HAMI_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                    unsigned int gz, unsigned int bx, unsigned int by,
                                                    unsigned int bz, unsigned int shm, CUstream s, void **params) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuLaunchCooperativeKernel_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(f, gx, gy, gz, bx, by, bz, shm), per_thread(s),
          hami_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

HAMI_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuGraphLaunch)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(hGraphExec, 0, 0, 0, 0, 0, 0, 0), hStream, hami_real.cuGraphLaunch(hGraphExec, hStream));
}

HAMI_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    hami_cuda_ensure();
    if (HAMI_UNLIKELY(!hami_real.cuGraphLaunch_ptsz)) return CUDA_ERROR_NOT_INITIALIZED;
    PACED(hami_cuda_shape_key(hGraphExec, 0, 0, 0, 0, 0, 0, 0), per_thread(hStream),
          hami_real.cuGraphLaunch_ptsz(hGraphExec, hStream));
}
