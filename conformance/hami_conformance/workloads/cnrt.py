"""A Cambricon CNRT workload for the limiter checks: ``python -m hami_conformance.workloads.cnrt OP ARG``.

``alloc MIB``: allocate MIB on device 0; exit 0 when granted, 2 on cnrtErrorNoMem.
``compute SECONDS``: invoke kernels back to back; print ``{"utilization_pct": x}`` (needs the fake
libcnrt, whose kernels last a set time: ``hamiFakeCnrtSetKernelNs``).

Functions are looked up in the global scope (``dlsym(RTLD_DEFAULT)``), where the preloaded limiter
shim comes first, as it does for a program linked against libcnrt.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

CNRT_SUCCESS = 0
CNRT_ERROR_NO_MEM = 100100
CNRT_FUNC_TYPE_BLOCK = 1
KERNEL_NS = 1_000_000


class Dim3(ctypes.Structure):
    _fields_ = (("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint))


def _runtime() -> ctypes.CDLL:
    ctypes.CDLL(os.environ.get("HAMI_CONFORMANCE_LIBCNRT", "libcnrt.so"), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(None)


def _device(cnrt: ctypes.CDLL) -> None:
    rc = cnrt.cnrtSetDevice(0)
    if rc != CNRT_SUCCESS:
        print(f"cnrt set-up failed rc={rc}", file=sys.stderr)
        sys.exit(3)


def alloc(cnrt: ctypes.CDLL, mib: int) -> int:
    ptr = ctypes.c_void_p()
    rc = cnrt.cnrtMalloc(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))
    print(f"alloc {mib} MiB rc={rc}")
    if rc == CNRT_SUCCESS:
        return 0
    return 2 if rc == CNRT_ERROR_NO_MEM else 3


def compute(cnrt: ctypes.CDLL, seconds: float) -> int:
    cnrt.hamiFakeCnrtSetKernelNs(ctypes.c_uint64(KERNEL_NS))
    cnrt.cnrtInvokeKernel.argtypes = (
        ctypes.c_void_p,
        Dim3,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
    )
    dim = Dim3(1, 1, 1)
    launches = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        rc = cnrt.cnrtInvokeKernel(None, dim, CNRT_FUNC_TYPE_BLOCK, None, 0, None)
        if rc != CNRT_SUCCESS:
            print(f"cnrtInvokeKernel rc={rc}", file=sys.stderr)
            return 3
        launches += 1
    cnrt.cnrtQueueSync(None)
    elapsed = time.monotonic() - start
    print(json.dumps({"utilization_pct": 100.0 * launches * KERNEL_NS / 1e9 / elapsed, "launches": launches}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("alloc", "compute"):
        print("usage: cnrt.py alloc MIB | compute SECONDS", file=sys.stderr)
        return 64
    cnrt = _runtime()
    _device(cnrt)
    return alloc(cnrt, int(argv[2])) if argv[1] == "alloc" else compute(cnrt, float(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
