/* Synchronisation wrappers.  After a stream, event or context synchronise the
 * stream-ordered frees before it have happened, and pools above their release
 * threshold have given memory back to the device: the charges of this
 * process's pools and graph allocator follow what they still reserve. */
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
