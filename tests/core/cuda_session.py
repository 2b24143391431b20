"""A workload process that keeps running and allocates device memory when told: one ``MIB`` per line on
stdin, one ``rc=N`` per line on stdout (0 granted, 2 out of memory).  It calls the CUDA driver API through
``dlsym(RTLD_DEFAULT)``, where a preloaded limiter shim comes first, as a program linked against libcuda does.
"""

from __future__ import annotations

import ctypes
import sys


def main() -> int:
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    cu = ctypes.CDLL(None)
    ctx = ctypes.c_void_p()
    for rc in (cu.cuInit(0), cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), cu.cuCtxSetCurrent(ctx)):
        if rc != 0:
            print(f"setup rc={rc}", flush=True)
            return 3
    print("READY", flush=True)
    for line in sys.stdin:
        ptr = ctypes.c_uint64()
        rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(line) << 20))
        print(f"rc={rc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
