"""Keep glibc from handing the engine's per-decision arrays back to the kernel.

Each placement decision allocates a few dozen temporary arrays the size of
the candidate set.  At 40,000 devices those are a few hundred KiB each, around
glibc's (dynamic) mmap threshold, and the heap top is trimmed after every
decision, so the next decision faults the same pages in again: measured on
the 2-core bench machine, ~1,100 minor page faults per decision and more
system than user time at 5,000 nodes x 8 devices.  Raising the mmap and trim
thresholds keeps that memory in the process (at most ``trim_mib`` of free heap
is retained) and removes the faults; results are unaffected.

This changes a process-wide allocator setting, so only the benchmarks that
say so call it, once at start-up (``bench/scoring.py``, ``bench/engine_allocate.py``);
it is no part of the SDK.  A long-running scheduler process may do the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

_tuned = False


def tune_allocator(mmap_mib: int = 16, trim_mib: int = 64) -> bool:
    """Raise glibc's mmap and trim thresholds; True when applied (False off glibc)."""
    global _tuned
    if _tuned:
        return True
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, mmap_mib << 20)) and bool(mallopt(M_TRIM_THRESHOLD, trim_mib << 20))
    _tuned = ok
    return ok
