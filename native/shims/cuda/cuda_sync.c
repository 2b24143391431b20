/* Synchronisation wrappers.  After a stream, event or context synchronise the
 * stream-ordered frees before it have happened, and pools above their release
 * threshold have given memory back to the device: the charges of this
 * process's pools and graph allocator follow what they still reserve.  A
 * stream or event query that answers CUDA_SUCCESS says the same (the work is
 * done), and CUDA 13's runtime synchronises through cuCtxSynchronize_v2: each
 * of them settles, or a deferred free would stay charged and refuse memory
 * that is free. */
#define _GNU_SOURCE
#include "cuda_shim.h"

static CUresult after_sync(CUresult rc) {
    if (rc == CUDA_SUCCESS && hami_shim_accounting()) {
        hami_cuda_release_deferred();
        hami_cuda_pools_settle(1);
        hami_cuda_graphs_settle();
    }
    return rc;
}

HAMI_EXPORT CUresult cuCtxSynchronize(void) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuCtxSynchronize);
    return after_sync(hami_real.cuCtxSynchronize());
}

HAMI_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuStreamSynchronize);
    return after_sync(hami_real.cuStreamSynchronize(hStream));
}

HAMI_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuStreamSynchronize_ptsz);
    return after_sync(hami_real.cuStreamSynchronize_ptsz(hStream));
}

HAMI_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuEventSynchronize);
    return after_sync(hami_real.cuEventSynchronize(hEvent));
}

HAMI_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuCtxSynchronize_v2);
    return after_sync(hami_real.cuCtxSynchronize_v2(ctx));
}

HAMI_EXPORT CUresult cuStreamQuery(CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuStreamQuery);
    return after_sync(hami_real.cuStreamQuery(hStream));
}

HAMI_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuStreamQuery_ptsz);
    return after_sync(hami_real.cuStreamQuery_ptsz(hStream));
}

HAMI_EXPORT CUresult cuEventQuery(CUevent hEvent) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuEventQuery);
    return after_sync(hami_real.cuEventQuery(hEvent));
}
