"""cffi (out-of-line API mode) build of ``hami_devices._native``, the Python face of the limiter core.

``setup.py`` names ``native/core/cffi_build.py:ffibuilder`` in ``cffi_modules``, so ``pip install .`` and
``pip install -e .`` compile it.  To rebuild in place during development (no pip), run from anywhere::

    python native/core/cffi_build.py

That compiles with the repository root as cffi's ``tmpdir``, so the module lands at
``hami_devices/_native.abi3.so``, the name pip's build gives it (the generated ``hami_devices/_native.c``
and object files, all git-ignored, land beside it and beside the sources).  The shims do not use this
module: ``native/build_native.py`` compiles the same core sources into each LD_PRELOAD library.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORE_SOURCES = ["region.c", "accounting.c", "procinfo.c", "slotlock.c", "pacer.c", "envcfg.c"]


def _rel(path: Path) -> str:
    # setuptools wants source paths relative to the project root (its cwd) when it can have them.
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


CDEF = """
#define HAMI_REGION_MAX_DEVICES 16
#define HAMI_REGION_MAX_PROCS 256
#define HAMI_REGION_VERSION ...
#define HAMI_OK ...
#define HAMI_E_OOM ...
#define HAMI_E_INVALID ...
#define HAMI_E_CORRUPT ...
#define HAMI_E_NOSLOT ...
#define HAMI_E_IO ...
#define HAMI_E_LOCK ...
#define HAMI_E_EXISTS ...
#define HAMI_E_PERM ...
#define HAMI_DEV_VIRTUAL ...
#define HAMI_DEV_SHARE ...
#define HAMI_CREATE_REPLACE ...
#define HAMI_CREATE_OR_OPEN ...

typedef struct hami_region hami_region;

typedef struct hami_device_info {
    uint64_t memory_limit;
    uint64_t memory_used;
    uint64_t memory_peak;
    uint32_t core_limit;
    int32_t util_valid;
    uint64_t util_x100;
    uint64_t launches;
    uint32_t flags;
    uint32_t reserved;
    uint64_t spill_used;
    uint64_t spill_limit;
    uint64_t spill_peak;
    uint64_t refused_memory;
    uint64_t refused_compute;
} hami_device_info;

typedef struct hami_proc_info {
    int32_t pid;
    int32_t alive;
    uint64_t start_time;
    uint64_t pidns;
    int32_t host_pid;
    int32_t locked;
    uint64_t used[16];
} hami_proc_info;

int hami_region_create(const char *path, int device_count, const uint64_t *memory_limits,
                       const uint32_t *core_limits, unsigned flags, hami_region **out, char *err,
                       size_t errlen);
int hami_region_open(const char *path, hami_region **out, char *err, size_t errlen);
void hami_region_close(hami_region *r);
int hami_region_device_count(const hami_region *r);
int hami_region_set_limit(hami_region *r, int device, uint64_t memory_limit, uint32_t core_limit);
int hami_region_register_self(hami_region *r);
int hami_region_register(hami_region *r, int32_t pid, uint64_t start_time);
void hami_region_unregister(hami_region *r, int slot);
int hami_region_reserve(hami_region *r, int slot, int device, uint64_t bytes);
void hami_region_release(hami_region *r, int slot, int device, uint64_t bytes);
void hami_region_count_refusal(hami_region *r, int device);
int hami_region_reclaim_dead(hami_region *r);
int hami_region_set_virtual(hami_region *r, int device, int enabled, uint64_t spill_limit);
int hami_region_set_core_policy(hami_region *r, int device, int share);
int hami_region_spill(hami_region *r, int slot, int device, uint64_t bytes);
void hami_region_unspill(hami_region *r, int slot, int device, uint64_t bytes);
int hami_region_device_info(hami_region *r, int device, hami_device_info *out);
int hami_region_proc_infos(hami_region *r, hami_proc_info *out, int max);
int hami_regions_usage(hami_region *const *regions, int n, hami_device_info *dev, int *dev_off,
                       hami_proc_info *proc, int max_procs, int *proc_off);
int hami_region_lock(hami_region *r);
void hami_region_unlock(hami_region *r);
uint64_t hami_proc_start_time(int32_t pid);
uint64_t hami_proc_pidns(void);
int hami_parse_bytes(const char *text, uint64_t *out);
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "hami_devices._native",
    '#include "hami_region.h"',
    sources=[_rel(HERE / name) for name in CORE_SOURCES],
    include_dirs=[_rel(ROOT / "native" / "include")],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    libraries=["pthread"],
)

if __name__ == "__main__":
    os.chdir(ROOT)
    # Same file name as `pip install -e .` produces (cffi compiles against the limited API), so an
    # in-place rebuild and a pip build replace each other instead of one shadowing the other.
    built = Path(ffibuilder.compile(tmpdir=str(ROOT), target="_native.abi3.so", verbose=False)).resolve()
    for other in (ROOT / "hami_devices").glob("_native.*.so"):
        if other.resolve() != built:
            other.unlink()
    print(built)
