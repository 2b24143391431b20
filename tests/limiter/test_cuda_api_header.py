"""native/include/hami_cuda_api.h against NVIDIA's cuda.h, when a CUDA toolkit is installed.

Two checks: (1) a file including cuda.h and then our header compiles, so every function we declare
has NVIDIA's exact prototype (a mismatch is a conflicting-types error); (2) the constants, sizes and
field offsets we rely on print the same numbers compiled against either header.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.limiter.helpers import INCLUDE

CANDIDATES = ["/usr/local/cuda/include", *sorted(glob.glob("/usr/local/cuda-*/include")), "/usr/include"]

DUMP = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#ifdef USE_VENDOR
#include <cuda.h>
#else
#include "hami_cuda_api.h"
#endif
#define V(x) printf(#x " %lld\n", (long long)(x));
int main(void) {
    V(CUDA_SUCCESS) V(CUDA_ERROR_INVALID_VALUE) V(CUDA_ERROR_OUT_OF_MEMORY) V(CUDA_ERROR_NOT_INITIALIZED)
    V(CUDA_ERROR_NO_DEVICE) V(CUDA_ERROR_INVALID_DEVICE) V(CUDA_ERROR_INVALID_CONTEXT)
    V(CUDA_ERROR_INVALID_HANDLE) V(CUDA_ERROR_NOT_FOUND) V(CUDA_ERROR_NOT_SUPPORTED)
    V(CU_GET_PROC_ADDRESS_DEFAULT) V(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
    V(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) V(CU_GET_PROC_ADDRESS_SUCCESS)
    V(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) V(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    V(CU_MEM_LOCATION_TYPE_DEVICE) V(CU_MEM_ALLOCATION_TYPE_PINNED) V(CU_MEM_ATTACH_GLOBAL)
    V(sizeof(CUresult)) V(sizeof(CUdeviceptr)) V(sizeof(CUdevice)) V(sizeof(CUmemGenericAllocationHandle))
    V(sizeof(cuuint64_t)) V(sizeof(CUmemLocation)) V(sizeof(CUmemAllocationProp))
    V(offsetof(CUmemAllocationProp, location)) V(offsetof(CUmemAllocationProp, location.id))
    V(offsetof(CUmemAllocationProp, win32HandleMetaData)) V(offsetof(CUmemAllocationProp, allocFlags))
    V(sizeof(CUlaunchConfig)) V(offsetof(CUlaunchConfig, sharedMemBytes)) V(offsetof(CUlaunchConfig, hStream))
    V(offsetof(CUlaunchConfig, attrs)) V(offsetof(CUlaunchConfig, numAttrs))
    /* VMM, pools, arrays and graph memory (the shim's accounting beyond cuMemAlloc) */
    V((long long)(uintptr_t)CU_STREAM_LEGACY) V((long long)(uintptr_t)CU_STREAM_PER_THREAD)
    V(CU_MEM_LOCATION_TYPE_HOST) V(CU_MEM_ALLOC_GRANULARITY_MINIMUM) V(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    V(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) V(sizeof(CUmemAccessDesc)) V(offsetof(CUmemAccessDesc, flags))
    V(CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES) V(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    V(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) V(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) V(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    V(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) V(CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    V(sizeof(CUmemPoolProps)) V(offsetof(CUmemPoolProps, location)) V(offsetof(CUmemPoolProps, maxSize))
    V(offsetof(CUmemPoolProps, usage)) V(offsetof(CUmemPoolProps, reserved))
    V(CU_AD_FORMAT_UNSIGNED_INT8) V(CU_AD_FORMAT_UNSIGNED_INT16) V(CU_AD_FORMAT_UNSIGNED_INT32)
    V(CU_AD_FORMAT_SIGNED_INT8) V(CU_AD_FORMAT_SIGNED_INT16) V(CU_AD_FORMAT_SIGNED_INT32) V(CU_AD_FORMAT_HALF)
    V(CU_AD_FORMAT_FLOAT) V(sizeof(CUarray_format))
    V(sizeof(CUDA_ARRAY_DESCRIPTOR)) V(offsetof(CUDA_ARRAY_DESCRIPTOR, Format))
    V(offsetof(CUDA_ARRAY_DESCRIPTOR, NumChannels)) V(sizeof(CUDA_ARRAY3D_DESCRIPTOR))
    V(offsetof(CUDA_ARRAY3D_DESCRIPTOR, Depth)) V(offsetof(CUDA_ARRAY3D_DESCRIPTOR, Format))
    V(offsetof(CUDA_ARRAY3D_DESCRIPTOR, NumChannels)) V(offsetof(CUDA_ARRAY3D_DESCRIPTOR, Flags))
    V(sizeof(CUDA_ARRAY_MEMORY_REQUIREMENTS)) V(offsetof(CUDA_ARRAY_MEMORY_REQUIREMENTS, alignment))
    V(CUDA_ARRAY3D_LAYERED) V(CUDA_ARRAY3D_CUBEMAP) V(CUDA_ARRAY3D_SPARSE) V(CUDA_ARRAY3D_DEFERRED_MAPPING)
    V(CU_GRAPH_NODE_TYPE_KERNEL) V(CU_GRAPH_NODE_TYPE_GRAPH) V(CU_GRAPH_NODE_TYPE_EMPTY)
    V(CU_GRAPH_NODE_TYPE_MEM_ALLOC) V(CU_GRAPH_NODE_TYPE_MEM_FREE) V(sizeof(CUgraphNodeType))
    V(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) V(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
    V(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) V(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    V(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS)) V(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, accessDescs))
    V(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, accessDescCount)) V(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize))
    V(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, dptr))
    V(CUDA_GRAPH_INSTANTIATE_SUCCESS) V(CUDA_GRAPH_INSTANTIATE_ERROR) V(sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS))
    V(offsetof(CUDA_GRAPH_INSTANTIATE_PARAMS, hUploadStream)) V(offsetof(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out))
    return 0;
}
"""


def _cuda_include() -> Path:
    for folder in CANDIDATES:
        if (Path(folder) / "cuda.h").is_file():
            return Path(folder)
    pytest.skip("no cuda.h installed")


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def test_prototypes_match_cuda_h(tmp_path: Path) -> None:
    cuda = _cuda_include()
    source = tmp_path / "proto.c"
    source.write_text('#include <cuda.h>\n#include "hami_cuda_api.h"\nint main(void) { return 0; }\n')
    out = subprocess.run(
        [_cc(), "-Wall", "-Werror", f"-I{cuda}", f"-I{INCLUDE}", str(source), "-o", str(tmp_path / "proto")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_constants_and_layouts_match_cuda_h(tmp_path: Path) -> None:
    cuda = _cuda_include()
    source = tmp_path / "dump.c"
    source.write_text(DUMP)
    results = []
    for vendor in (True, False):
        exe = tmp_path / ("vendor" if vendor else "ours")
        flags = ["-DUSE_VENDOR", f"-I{cuda}"] if vendor else [f"-I{INCLUDE}"]
        subprocess.run([_cc(), *flags, str(source), "-o", str(exe)], check=True)
        results.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    assert results[0] == results[1]
