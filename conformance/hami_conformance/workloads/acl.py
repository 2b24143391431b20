"""An Ascend ACL workload for the limiter checks: ``python -m hami_conformance.workloads.acl OP ARG``.

``alloc MIB``: allocate MIB of HBM on device 0; exit 0 when granted, 2 on ACL_ERROR_RT_MEMORY_ALLOCATION.
``compute SECONDS``: launch kernels back to back; print ``{"utilization_pct": x}`` (needs the fake
libascendcl, whose kernels last a set time: ``hamiFakeAclSetKernelNs``).

Functions are looked up in the global scope (``dlsym(RTLD_DEFAULT)``), where the preloaded limiter
shim comes first, as it does for a program linked against libascendcl.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

ACL_SUCCESS = 0
ACL_ERROR_RT_MEMORY_ALLOCATION = 207001
ACL_MEM_MALLOC_HUGE_FIRST = 0
KERNEL_NS = 1_000_000


def _runtime() -> ctypes.CDLL:
    ctypes.CDLL(os.environ.get("HAMI_CONFORMANCE_LIBASCENDCL", "libascendcl.so"), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(None)


def _device(acl: ctypes.CDLL) -> None:
    for rc in (acl.aclInit(None), acl.aclrtSetDevice(0)):
        if rc != ACL_SUCCESS:
            print(f"acl set-up failed rc={rc}", file=sys.stderr)
            sys.exit(3)


def alloc(acl: ctypes.CDLL, mib: int) -> int:
    ptr = ctypes.c_void_p()
    rc = acl.aclrtMalloc(ctypes.byref(ptr), ctypes.c_size_t(mib << 20), ACL_MEM_MALLOC_HUGE_FIRST)
    print(f"alloc {mib} MiB rc={rc}")
    if rc == ACL_SUCCESS:
        return 0
    return 2 if rc == ACL_ERROR_RT_MEMORY_ALLOCATION else 3


def compute(acl: ctypes.CDLL, seconds: float) -> int:
    acl.hamiFakeAclSetKernelNs(ctypes.c_uint64(KERNEL_NS))
    launches = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        rc = acl.aclrtLaunchKernel(None, ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)
        if rc != ACL_SUCCESS:
            print(f"aclrtLaunchKernel rc={rc}", file=sys.stderr)
            return 3
        launches += 1
    acl.aclrtSynchronizeStream(None)
    elapsed = time.monotonic() - start
    print(json.dumps({"utilization_pct": 100.0 * launches * KERNEL_NS / 1e9 / elapsed, "launches": launches}))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("alloc", "compute"):
        print("usage: acl.py alloc MIB | compute SECONDS", file=sys.stderr)
        return 64
    acl = _runtime()
    _device(acl)
    return alloc(acl, int(argv[2])) if argv[1] == "alloc" else compute(acl, float(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
