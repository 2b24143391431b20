"""native/include/hami_cuda_api.h against NVIDIA's cuda.h: every cuda.h found, never skipped.

The headers checked: an installed CUDA toolkit's, if any, and always those of NVIDIA's runtime wheels,
which the test extra installs (``nvidia-cuda-runtime-cu12``: CUDA 12.9; ``nvidia-cuda-runtime``: CUDA 13).
Three checks per header: (1) a file including cuda.h and then our header compiles, so every function we
declare has NVIDIA's exact prototype (a mismatch is a conflicting-types error) -- once as an application
includes cuda.h and once with ``__CUDA_API_VERSION_INTERNAL``, under which cuda.h also declares the entry
points it otherwise hides (the ``_ptsz`` variants, the 32-bit v1 ABI, ``cuGetProcAddress`` v1,
``cuGraphInstantiate_v2``); (2) cuda.h really declares each of those, so (1) compared them; (3) the
constants, sizes and field offsets we rely on print the same numbers compiled against either header.
"""

from __future__ import annotations

import glob
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.limiter.helpers import INCLUDE

TOOLKITS = ["/usr/local/cuda/include", *sorted(glob.glob("/usr/local/cuda-*/include")), "/usr/include"]
# the runtime wheels of the test extra and the folder of their headers inside the package
WHEELS = {"nvidia-cuda-runtime-cu12": "nvidia.cuda_runtime", "nvidia-cuda-runtime": "nvidia.cu13"}

# Declared by cuda.h only with __CUDA_API_VERSION_INTERNAL (cuDeviceGetUuid: CUDA 13 maps it to _v2
# otherwise), and by our header always: the shim exports them.
GUARDED = [
    "cuGetProcAddress", "cuGraphInstantiate_v2", "cuDeviceGetUuid",
    "cuLaunchKernel_ptsz", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch_ptsz",
    "cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz", "cuStreamSynchronize_ptsz",
    "cuGraphInstantiateWithParams_ptsz", "cuStreamQuery_ptsz",
    "cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo", "cuDeviceTotalMem", "cuArrayCreate",
    "cuArray3DCreate",
]  # fmt: skip
SINCE_13 = ["cuCtxSynchronize_v2"]


def _wheel_include(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "include"
    return folder if (folder / "cuda.h").is_file() else None


def _headers() -> dict[str, Path | None]:
    found: dict[str, Path | None] = {
        f"toolkit:{folder}": Path(folder) for folder in TOOLKITS if (Path(folder) / "cuda.h").is_file()
    }
    for wheel, module in WHEELS.items():
        found[wheel] = _wheel_include(module)  # None: the wheel is missing, and its check fails
    return found


HEADERS = _headers()


def _include(name: str) -> Path:
    folder = HEADERS[name]
    if folder is None:
        pytest.fail(f"{name} is not installed: install the test extra (pip install -e '.[test]')")
    return folder


def _cuda_version(folder: Path) -> int:
    found = re.search(r"^#define CUDA_VERSION (\d+)", (folder / "cuda.h").read_text(errors="replace"), re.M)
    assert found, f"no CUDA_VERSION in {folder / 'cuda.h'}"
    return int(found.group(1))


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
    V(CUDA_ERROR_INVALID_HANDLE) V(CUDA_ERROR_NOT_FOUND) V(CUDA_ERROR_NOT_READY) V(CUDA_ERROR_NOT_SUPPORTED)
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
    V(offsetof(CUmemPoolProps, usage)) /* CUDA 13 puts a field into the reserved bytes: never touched here */
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
    /* context limits, device attributes, managed-memory advice, shareable handles, the v1 ABI */
    V(CU_LIMIT_STACK_SIZE) V(CU_LIMIT_PRINTF_FIFO_SIZE) V(CU_LIMIT_MALLOC_HEAP_SIZE) V(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH)
    V(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT) V(CU_LIMIT_MAX_L2_FETCH_GRANULARITY)
    V(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) V(sizeof(CUlimit))
    V(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) V(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
    V(CU_MEM_ADVISE_SET_READ_MOSTLY) V(CU_MEM_ADVISE_SET_PREFERRED_LOCATION) V(CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
    V(CU_MEM_ADVISE_SET_ACCESSED_BY) V(CU_MEM_ADVISE_UNSET_ACCESSED_BY) V(CU_DEVICE_CPU)
    V(CU_MEM_HANDLE_TYPE_NONE) V(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) V(CU_MEM_HANDLE_TYPE_WIN32)
    V(CU_MEM_HANDLE_TYPE_WIN32_KMT) V(CU_MEM_HANDLE_TYPE_FABRIC) V(sizeof(CUmemAllocationHandleType))
    V(sizeof(CUdeviceptr_v1)) V(sizeof(CUDA_ARRAY_DESCRIPTOR_v1)) V(offsetof(CUDA_ARRAY_DESCRIPTOR_v1, Format))
    V(offsetof(CUDA_ARRAY_DESCRIPTOR_v1, NumChannels)) V(sizeof(CUDA_ARRAY3D_DESCRIPTOR_v1))
    V(offsetof(CUDA_ARRAY3D_DESCRIPTOR_v1, Depth)) V(offsetof(CUDA_ARRAY3D_DESCRIPTOR_v1, Format))
    V(offsetof(CUDA_ARRAY3D_DESCRIPTOR_v1, Flags))
    /* the compute pacer's probes */
    V(CU_STREAM_CAPTURE_STATUS_NONE) V(CU_STREAM_CAPTURE_STATUS_ACTIVE) V(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    V(sizeof(CUstreamCaptureStatus)) V(CU_EVENT_DEFAULT) V(CU_EVENT_BLOCKING_SYNC) V(CU_EVENT_DISABLE_TIMING)
    V(CU_EVENT_INTERPROCESS)
    return 0;
}
"""


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler"
    return cc


INTERNAL = "-D__CUDA_API_VERSION_INTERNAL"


@pytest.mark.parametrize("mode", ["application", "internal"])
@pytest.mark.parametrize("header", sorted(HEADERS))
def test_prototypes_match_cuda_h(tmp_path: Path, header: str, mode: str) -> None:
    cuda = _include(header)
    source = tmp_path / "proto.c"
    source.write_text('#include <cuda.h>\n#include "hami_cuda_api.h"\nint main(void) { return 0; }\n')
    flags = [INTERNAL] if mode == "internal" else []
    out = subprocess.run(
        [_cc(), "-Wall", "-Werror", *flags, f"-I{cuda}", f"-I{INCLUDE}", str(source), "-o", str(tmp_path / "proto")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("header", sorted(HEADERS))
def test_guarded_declarations_are_checked(tmp_path: Path, header: str) -> None:
    # Each guarded name must be one cuda.h declares, or the prototype check above compared nothing.
    cuda = _include(header)
    names = GUARDED + (SINCE_13 if _cuda_version(cuda) >= 13000 else [])
    source = tmp_path / "guarded.c"
    source.write_text("#include <cuda.h>\n" + "".join(f"void *p_{n} = (void *)&{n};\n" for n in names))
    out = subprocess.run(
        [_cc(), "-c", "-Werror", INTERNAL, f"-I{cuda}", str(source), "-o", str(tmp_path / "guarded.o")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("header", sorted(HEADERS))
def test_constants_and_layouts_match_cuda_h(tmp_path: Path, header: str) -> None:
    cuda = _include(header)
    source = tmp_path / "dump.c"
    source.write_text(DUMP)
    results = []
    for vendor in (True, False):
        exe = tmp_path / ("vendor" if vendor else "ours")
        flags = ["-DUSE_VENDOR", f"-I{cuda}"] if vendor else [f"-I{INCLUDE}"]
        subprocess.run([_cc(), INTERNAL, *flags, str(source), "-o", str(exe)], check=True)
        results.append(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    assert results[0] == results[1]
