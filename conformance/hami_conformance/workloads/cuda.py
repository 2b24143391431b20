"""A CUDA driver-API workload for the limiter checks: ``python -m hami_conformance.workloads.cuda OP ARG``.

``alloc MIB``: allocate MIB on device 0; exit 0 when granted, 2 on CUDA_ERROR_OUT_OF_MEMORY.
``compute SECONDS``: launch kernels back to back; print ``{"utilization_pct": x}`` (needs the fake
libcuda, whose kernels last a set time: ``hamiFakeCudaSetKernelNs``).

Functions are looked up in the global scope (``dlsym(RTLD_DEFAULT)``), where the preloaded limiter
shim comes first, as it does for a program linked against libcuda.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
KERNEL_NS = 1_000_000


def _driver() -> ctypes.CDLL:
    ctypes.CDLL(os.environ.get("HAMI_CONFORMANCE_LIBCUDA", "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(None)


def _context(cu: ctypes.CDLL) -> None:
    ctx = ctypes.c_void_p()
    for rc in (cu.cuInit(0), cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), cu.cuCtxSetCurrent(ctx)):
        if rc != CUDA_SUCCESS:
            print(f"cuda set-up failed rc={rc}", file=sys.stderr)
            sys.exit(3)


def alloc(cu: ctypes.CDLL, mib: int) -> int:
    ptr = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))
    print(f"alloc {mib} MiB rc={rc}")
    if rc == CUDA_SUCCESS:
        return 0
    return 2 if rc == CUDA_ERROR_OUT_OF_MEMORY else 3


def compute(cu: ctypes.CDLL, seconds: float) -> int:
    cu.hamiFakeCudaSetKernelNs(ctypes.c_uint64(KERNEL_NS))
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    cu.cuModuleLoadData(ctypes.byref(module), b"fake")
    cu.cuModuleGetFunction(ctypes.byref(function), module, b"k")
    launches = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        rc = cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        if rc != CUDA_SUCCESS:
            print(f"cuLaunchKernel rc={rc}", file=sys.stderr)
            return 3
        launches += 1
    cu.cuCtxSynchronize()
    elapsed = time.monotonic() - start
    print(json.dumps({"utilization_pct": 100.0 * launches * KERNEL_NS / 1e9 / elapsed, "launches": launches}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("alloc", "compute"):
        print("usage: cuda.py alloc MIB | compute SECONDS", file=sys.stderr)
        return 64
    cu = _driver()
    _context(cu)
    return alloc(cu, int(argv[2])) if argv[1] == "alloc" else compute(cu, float(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
