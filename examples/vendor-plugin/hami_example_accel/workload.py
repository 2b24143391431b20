"""The limiter harness for the Example Runtime: ``python -m hami_example_accel.workload alloc MIB``.

The conformance suite starts it with an allocation's environment (so the limiter shim is preloaded,
exactly as in production) and reads its exit status: 0 when the runtime granted MIB of device memory
on the first visible device, 2 on the runtime's out-of-memory error, anything else is a harness error.

Functions are looked up in the global scope (``dlsym(RTLD_DEFAULT)``), where the preloaded shim comes
first - as it does for a program linked against the runtime.  (A ctypes call through the runtime's
own handle would bypass an LD_PRELOAD interposer.)
"""

from __future__ import annotations

import ctypes
import os
import sys

EXRT_SUCCESS = 0
EXRT_ERROR_OUT_OF_MEMORY = 2
RUNTIME_ENV = "HAMI_EXAMPLE_RUNTIME"


def alloc(mib: int) -> int:
    ctypes.CDLL(os.environ.get(RUNTIME_ENV, "libexrt.so"), mode=ctypes.RTLD_GLOBAL)
    rt = ctypes.CDLL(None)
    if rt.exrtSetDevice(0) != EXRT_SUCCESS:
        print("exrtSetDevice(0) failed", file=sys.stderr)
        return 3
    ptr = ctypes.c_void_p()
    rc = rt.exrtMalloc(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))
    print(f"alloc {mib} MiB rc={rc}")
    if rc == EXRT_SUCCESS:
        return 0
    return 2 if rc == EXRT_ERROR_OUT_OF_MEMORY else 3


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != "alloc" or not argv[2].isdigit():
        print("usage: python -m hami_example_accel.workload alloc MIB", file=sys.stderr)
        return 64
    return alloc(int(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
